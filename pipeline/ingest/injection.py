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
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE | re.MULTILINE))
    for name, pattern in (
        ("ignore previous instructions", rf"\b(?:ignore|forget|override|bypass)\s+{_PREVIOUS}\s+{_RULES}"),
        ("disregard the above", rf"\bdisregard\s+{_PREVIOUS}\b"),
        (
            "ignore your instructions",
            rf"\b(?:ignore|disregard|forget)\s+(?:all\s+)?(?:your|these|those)\s+{_RULES}",
        ),
        (
            "addresses a model",
            r"\byou\s+are\s+(?:now\s+)?(?:chatgpt|gpt-?\d|claude|gemini|llama|an?\s+(?:ai|large\s+language\s+model|language\s+model|llm|chatbot|ai\s+assistant))\b",
        ),
        (
            "addresses a model",
            r"\b(?:as|dear)\s+an?\s+(?:ai|language\s+model|llm)\b(?:\s+(?:assistant|model))?\s*,",
        ),
        ("system prompt", r"\bsystem\s+prompt\b"),
        ("new instructions", r"\b(?:new|updated|real|actual|important)\s+instructions?\s*:"),
        (
            "respond with",
            r"\b(?:respond|reply|answer|output)\s+(?:only\s+)?with\s+(?:the\s+following|exactly|only|json|[\"'{])",
        ),
        ("respond with", r"^\s*(?:respond|reply|answer)\s+(?:only\s+)?with\b"),
        ("role tag", r"<\|?\s*/?\s*(?:system|assistant|user|im_start|im_end|endoftext)\s*\|?>"),
        ("role tag", r"\[/?INST\]|<</?SYS>>"),
        ("role tag", r"^\s*#{0,3}\s*(?:system|assistant)\s*:\s*\S"),
        ("jailbreak", r"\b(?:developer|dan|jailbreak)\s+mode\b|\bdo\s+anything\s+now\b"),
        ("close the data block", r"</\s*document\s*>"),
    )
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
    for kind, pattern in PATTERNS:
        match = pattern.search(text)
        if match and (best is None or match.start() < best[0]):
            best = (match.start(), match.end(), kind)
    if best is None:
        return None
    start, end, kind = best
    return Finding(kind, start, end, excerpt(text[max(0, start - _CONTEXT_CHARS) : end + _CONTEXT_CHARS]))


def excerpt(text: str) -> str:
    """`text` as one short, printable line."""
    flat = " ".join(text.split())
    safe = "".join(ch if unicodedata.category(ch)[0] != "C" else f"\\u{ord(ch):04x}" for ch in flat)
    return safe if len(safe) <= EXCERPT_CHARS else safe[: EXCERPT_CHARS - 1] + "…"
