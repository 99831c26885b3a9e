"""Prompt-injection detection: instruction-like text aimed at a model, inside a filing (pure).

Filing text is data and the prompts say so (`pipeline.llm.prompts`); this only flags filings that
try to address the model anyway, so an analyst knows to look. The patterns are phrases that
talk to a model or fake a chat turn; ordinary filing prose ("we respond to customer
requests", "our AI products") does not match them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

EXCERPT_CHARS = 160
_CONTEXT_CHARS = 40

_PREVIOUS = (
    r"(?:all\s+|any\s+|the\s+|your\s+|of\s+)*(?:previous|prior|above|earlier|preceding|foregoing|original)"
)
_RULES = r"(?:instructions?|prompts?|directions?|directives?|rules|guidelines|context|messages?)"
# (kind, pattern, words): a pattern can only match text holding one of its words (lower case):
# as a whole word when it is one (the pattern puts it between word boundaries), else as a
# substring. Finding a word in the case-folded text is far cheaper than a case-insensitive regex
# scan of 50 KB, and a plain substring test would let "ai" in "certain", "you" in "your" or
# "mode" in "model" send nearly every filing through the scans.
_RAW: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "ignore previous instructions",
        rf"\b(?:ignore|forget|override|bypass)\s+{_PREVIOUS}\s+{_RULES}",
        ("ignore", "forget", "override", "bypass"),
    ),
    ("disregard the above", rf"\bdisregard\s+{_PREVIOUS}\b", ("disregard",)),
    (
        "ignore your instructions",
        rf"\b(?:ignore|disregard|forget)\s+(?:all\s+)?(?:your|these|those)\s+{_RULES}",
        ("ignore", "disregard", "forget"),
    ),
    (
        "addresses a model",
        r"\byou\s+are\s+(?:now\s+)?(?:chatgpt|gpt-?\d|claude|gemini|llama|an?\s+(?:ai|large\s+language\s+model|language\s+model|llm|chatbot|ai\s+assistant))\b",
        ("you",),
    ),
    (
        "addresses a model",
        r"\b(?:as|dear)\s+an?\s+(?:ai|language\s+model|llm)\b(?:\s+(?:assistant|model))?\s*,",
        ("ai", "language", "llm"),
    ),
    ("system prompt", r"\bsystem\s+prompt\b", ("prompt",)),
    (
        "new instructions",
        r"\b(?:new|updated|real|actual|important)\s+instructions?\s*:",
        ("instruction", "instructions"),
    ),
    (
        "respond with",
        r"\b(?:respond|reply|answer|output)\s+(?:only\s+)?with\s+(?:the\s+following|exactly|only|json|[\"'{])",
        ("respond", "reply", "answer", "output"),
    ),
    ("respond with", r"^\s*(?:respond|reply|answer)\s+(?:only\s+)?with\b", ("respond", "reply", "answer")),
    ("role tag", r"<\|?\s*/?\s*(?:system|assistant|user|im_start|im_end|endoftext)\s*\|?>", ("<",)),
    ("role tag", r"\[/?INST\]|<</?SYS>>", ("inst]", "sys>>")),
    ("role tag", r"^\s*#{0,3}\s*(?:system|assistant)\s*:\s*\S", ("system", "assistant")),
    ("jailbreak", r"\b(?:developer|dan|jailbreak)\s+mode\b|\bdo\s+anything\s+now\b", ("mode", "anything")),
    ("close the data block", r"</\s*document\s*>", ("</",)),
)
PATTERNS: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE | re.MULTILINE), words) for kind, pattern, words in _RAW
)


@dataclass(frozen=True)
class Finding:
    kind: str
    start: int
    end: int
    excerpt: str
    """Around the match, whitespace collapsed, control characters escaped, at most
    EXCERPT_CHARS long: safe to print in a terminal or store."""


def detect(text: str) -> Finding | None:
    """The earliest instruction-like passage in `text`, or None."""
    best: tuple[int, int, str] | None = None
    lowered = text.casefold()
    seen: dict[str, bool] = {}
    for kind, pattern, gate in PATTERNS:
        if not any(_holds(lowered, word, seen) for word in gate):
            continue
        match = pattern.search(text)
        if match and (best is None or match.start() < best[0]):
            best = (match.start(), match.end(), kind)
    if best is None:
        return None
    start, end, kind = best
    return Finding(kind, start, end, excerpt(text[max(0, start - _CONTEXT_CHARS) : end + _CONTEXT_CHARS]))


def _holds(lowered: str, word: str, seen: dict[str, bool]) -> bool:
    """Whether `lowered` holds `word`: as a whole word (between word boundaries, as `\\b`
    sees them) when it is one, else anywhere. Remembered in `seen` for the next pattern."""
    found = seen.get(word)
    if found is None:
        found = _whole_word(lowered, word) if word.isalnum() else word in lowered
        seen[word] = found
    return found


def _whole_word(text: str, word: str) -> bool:
    at = text.find(word)
    while at != -1:
        end = at + len(word)
        if not (at and _word_char(text[at - 1])) and not (end < len(text) and _word_char(text[end])):
            return True
        at = text.find(word, end)
    return False


def _word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def excerpt(text: str) -> str:
    """`text` as one short, printable line."""
    flat = " ".join(text.split())
    safe = "".join(ch if unicodedata.category(ch)[0] != "C" else f"\\u{ord(ch):04x}" for ch in flat)
    return safe if len(safe) <= EXCERPT_CHARS else safe[: EXCERPT_CHARS - 1] + "…"
