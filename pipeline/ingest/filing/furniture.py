"""Page furniture: the page numbers and running headers and footers of a printed filing (pure).

An EDGAR HTML document keeps its print layout: a page break (`page-break-before/after`, an
`<hr>`) with the page's number just before it and, on many filings, a running header just after
it ("Table of Contents", "Apple Inc. | 2023 Form 10-K | 23"). Left in, they split sentences and
tables that cross a page, and cost tokens on every page. A line next to a break is dropped when
it is a page number, or when the same line (its digits aside) lies next to several breaks; a
sentence among those ("The accompanying notes are an integral part of these statements.") stays
the first time it is said.
"""

from __future__ import annotations

import re
from collections import Counter

PAGE_BREAK = "\x0c"
"""The walk's marker for a page break (a form feed: never a line of text)."""
NEAR_LINES = 2
"""Lines on each side of a break that may be furniture."""
MIN_REPEATS = 3
"""A line seen next to this many breaks is a running header or footer."""
MAX_FURNITURE_CHARS = 120

_PAGE_NUMBER = re.compile(
    r"^(?:page\s+)?[-\u2013\u2014(]?\s*(?:[A-Z]{1,2}\s?-\s?)?(?:\d{1,3}|[ivxlc]{1,7})\s*[-\u2013\u2014)]?"
    r"(?:\s+of\s+\d{1,4})?$",
    re.IGNORECASE,
)
_DIGITS = re.compile(r"\d+")
_SENTENCE = re.compile(r"^[a-z].*(?:\s\S+){5,}[.!?]$")
"""Six words or more ending as a sentence ends: not a running header's "Company | Form 10-K"."""


def drop(lines: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """`lines` without page breaks, and without the furniture next to them."""
    breaks = [i for i, (line, _) in enumerate(lines) if line == PAGE_BREAK]
    if not breaks:
        return lines
    near: dict[int, str] = {}
    for at in breaks:
        for i in _neighbours(lines, at):
            near[i] = _shape(lines[i][0])
    repeats = Counter(shape for shape in near.values() if shape)
    # A sentence repeated at breaks (a statement's footer) is text the first time it is said.
    first = {
        shape: min(i for i, s in near.items() if s == shape) for shape in repeats if _SENTENCE.match(shape)
    }
    furniture = {
        i
        for i, shape in near.items()
        if _PAGE_NUMBER.match(lines[i][0])
        or (shape and repeats[shape] >= MIN_REPEATS and i != first.get(shape))
    }
    return [item for i, item in enumerate(lines) if item[0] != PAGE_BREAK and i not in furniture]


def _neighbours(lines: list[tuple[str, int]], at: int) -> list[int]:
    found: list[int] = []
    for step in (-1, 1):
        i, taken = at + step, 0
        while 0 <= i < len(lines) and taken < NEAR_LINES:
            if lines[i][0] != PAGE_BREAK and lines[i][0].strip():  # a plain-text page's blank lines
                found.append(i)
                taken += 1
            i += step
    return found


def _shape(line: str) -> str:
    """A short line with its numbers masked (page 12 and page 13 alike); "" for a long one."""
    return _DIGITS.sub("#", line.lower()) if len(line) <= MAX_FURNITURE_CHARS else ""
