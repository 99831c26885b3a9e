"""Pure text analysis of a document: sentences with offsets, headings, header lines.

Every sentence's text is `doc[start:end]`, so anything built from it is a verbatim,
contiguous substring of the document.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

MAX_SENTENCE_CHARS = 400
_TERMINAL = ".!?:;"
_BOUNDARY = re.compile(r"[.!?][\"'\u201d\u2019)\]]*(\s+)(?=[\"'\u201c\u2018(\[]?[A-Z0-9$\u2022-])")
_LAST_WORD = re.compile(r"([A-Za-z.]+)[.!?][\"'\u201d\u2019)\]]*$")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ABBREVIATIONS = _words(
    "inc corp co ltd llc no nos mr mrs ms dr st vs u.s u.k e.g i.e approx jan feb mar apr jun jul aug "
    "sep sept oct nov dec fig sec"
)
_ITEM_HEADING = re.compile(r"^\s*(item|part)\s+[0-9ivx]+[a-z]?\b", re.IGNORECASE)
_HEADER_LINE = re.compile(
    r"^[ \t]*([A-Za-z][A-Za-z0-9 ,'\u2019()/&.-]{0,60}?)[ \t]*:[ \t]*(\S[^\n]{0,200}?)[ \t\r]*$",
    re.MULTILINE,
)
WORD = re.compile(r"[a-z][a-z0-9']*")


@dataclass(frozen=True)
class Sentence:
    """One sentence of a document; `text` is `doc[start:end]`."""

    start: int
    end: int
    text: str
    section: str  # the major heading(s) above, lowercased ("" before any)
    title: str | None  # its paragraph's short title (inline first sentence or the line above)
    lower: str
    block: int  # where its paragraph starts: sentences of one paragraph share it
    words: frozenset[str]


@dataclass(frozen=True)
class Doc:
    """A document split for answering: sentences in order, and `label: value` header lines."""

    text: str
    lower: str
    sentences: tuple[Sentence, ...]
    headers: tuple[tuple[str, str], ...]


def words_of(text: str) -> frozenset[str]:
    """Lowercased word tokens of `text`."""
    return frozenset(WORD.findall(text.lower()))


def has_word(words: Iterable[str], stem: str) -> bool:
    """Whether any word starts with `stem` (so "revenue" matches "revenues")."""
    return any(word.startswith(stem) for word in words)


@lru_cache(maxsize=256)
def _stem_pattern(stems: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(stem) for stem in sorted(stems, key=len, reverse=True))
    return re.compile(rf"\b({alternatives})")


def stems_in(lower: str, stems: tuple[str, ...]) -> set[str]:
    """Which of `stems` start a word of `lower` (lowercased text); one regex pass."""
    return set(_stem_pattern(stems).findall(lower)) if stems else set()


_MINOR_WORDS = _words("a an and as at by for in of on or the to with")


def _title_like(line: str) -> bool:
    """Most words capitalized, as in "Management's Discussion and Analysis" or ALL CAPS."""
    if len(line) > 160 or ". " in line:  # cheap exits: this runs on every line
        return False
    upper = lower = 0
    for word in line.split():
        if word[0].isupper():
            upper += 1
        elif word[0].islower() and word not in _MINOR_WORDS:
            lower += 1
            if lower > 3:
                return False
    return upper > 0 and upper >= 4 * lower


def is_heading_line(line: str) -> bool:
    """A line that titles what follows: `Item 1A. ...`, short or title-cased, no end stop."""
    stripped = line.strip()
    if not stripped or not any(ch.isalpha() for ch in stripped):
        return False
    if _ITEM_HEADING.match(stripped):
        return True
    if stripped[-1] in _TERMINAL + ",":
        return False
    return len(stripped.split()) <= 10 or (len(stripped.split()) <= 20 and _title_like(stripped))


def _lines(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = 0
    for line in text.split("\n"):
        spans.append((pos, pos + len(line)))
        pos += len(line) + 1
    return spans


def _continues(previous: str, line: str) -> bool:
    """Whether `line` goes on with the paragraph `previous` ended (both stripped, non-blank).

    Hard-wrapped prose fills its lines: a long line continues even after a full stop,
    while short lines, headings and `Label: value` lines stand alone.
    """
    if _ITEM_HEADING.match(line) or _ITEM_HEADING.match(previous) or _title_like(previous):
        return False
    if previous[-1] in _TERMINAL:
        return len(previous) >= 60 and not (len(line) < 80 and _HEADER_LINE.match(line))
    return len(previous) >= 50 or line[0].islower()


def _blocks(text: str) -> list[tuple[int, int, str | None]]:
    """Runs of lines joined where a sentence wraps onto the next line.

    Each block carries the heading line right above it, if any. Hard-wrapped filing text
    keeps long lines without end punctuation, so those continue; short ones are titles.
    """
    blocks: list[tuple[int, int, str | None]] = []
    current: tuple[int, int] | None = None
    previous_line = ""  # the last non-blank line, across blank lines
    above: str | None = None
    for start, end in _lines(text):
        line = text[start:end].strip()
        if not line:
            if current:
                blocks.append((*current, above))
            current = None
            continue
        if current is not None and _continues(previous_line, line):
            current = (current[0], end)
        else:
            if current:
                blocks.append((*current, above))
            above = previous_line if is_heading_line(previous_line) else None
            current = (start, end)
        previous_line = line
    if current:
        blocks.append((*current, above))
    return blocks


def _split(text: str, start: int, end: int) -> Iterable[tuple[int, int]]:
    cursor = start
    for match in _BOUNDARY.finditer(text, start, end):
        last = _LAST_WORD.search(text, max(cursor, match.start() - 20), match.start() + 1)
        if last and last.group(1).lower().rstrip(".") in _ABBREVIATIONS:
            continue
        yield cursor, match.start(1)
        cursor = match.end(1)
    yield cursor, end


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end - start > MAX_SENTENCE_CHARS:
        # Cut long runs (tables, lists) at a word boundary: still a verbatim substring.
        cut = text.rfind(" ", start, start + MAX_SENTENCE_CHARS)
        end = cut if cut > start else start + MAX_SENTENCE_CHARS
        while end > start and text[end - 1].isspace():
            end -= 1
    return start, end


def _short_title(text: str) -> str | None:
    title = text.strip().rstrip(".:;").strip()
    if not title or _ITEM_HEADING.match(title) or len(title.split()) > 12:
        return None
    return title


@lru_cache(maxsize=32)
def analyze(text: str) -> Doc:
    """Split `text` into sentences (with headings and sections) and header lines."""
    sentences: list[Sentence] = []
    item, sub = "", ""
    for block_start, block_end, above in _blocks(text):
        block_text = text[block_start:block_end].strip()
        heading_block = is_heading_line(block_text)
        # Sections change at major headings only: "Item 1A. Risk Factors" starts one, a
        # title-cased subheading refines it; sentence-case titles of single risk factors
        # ("Supply chain concentration") do not.
        if heading_block and _ITEM_HEADING.match(block_text):
            item, sub = block_text.lower(), ""
        elif heading_block and len(block_text.split()) >= 2 and _title_like(block_text):
            sub = block_text.lower()
        section = f"{item} / {sub}" if item and sub else item or sub
        raw = [(block_start, block_end)] if heading_block else _split(text, block_start, block_end)
        spans = [span for span in (_trim(text, *r) for r in raw) if span[0] < span[1]]
        first = text[spans[0][0] : spans[0][1]] if spans else ""
        # "Supply chain concentration. We depend on ..." titles its paragraph inline.
        inline = len(spans) > 1 and len(first.split()) <= 8 and first.endswith(".") and first[0].isupper()
        title = _short_title(first) if inline else _short_title(above) if above else None
        for index, (start, end) in enumerate(spans):
            sentence_text = text[start:end]
            sentences.append(
                Sentence(
                    start=start,
                    end=end,
                    text=sentence_text,
                    section=section,
                    title=None if inline and index == 0 else title,
                    block=block_start,
                    lower=sentence_text.lower(),
                    words=words_of(sentence_text),
                )
            )
    headers = tuple(
        (match.group(1).strip().lower(), match.group(2).strip())
        for match in _HEADER_LINE.finditer(text)
        if len(match.group(1).split()) <= 6
    )
    lower = text.lower()
    cover = _cover_name(text, lower)
    if cover:
        headers += (("exact name of registrant company", cover),)
    return Doc(text, lower, tuple(sentences), headers)


def _cover_name(text: str, lower: str) -> str | None:
    """The line above "(Exact name of registrant as specified in its charter)"."""
    found = lower.find("exact name of registrant")
    if found < 0:
        return None
    lines = [line.strip() for line in text[max(0, found - 400) : found].split("\n")[:-1]]
    filled = [line for line in lines if line]
    return filled[-1][:120] if filled else None
