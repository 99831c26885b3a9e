"""Grounding: is a quote the model gave really in the filing, and where (pure).

A quote is looked up verbatim first, then with whitespace runs collapsed and case folded
(models re-wrap lines and change capitals). Offsets always point into the original text,
so `text[start:end]` is the passage that grounds the quote.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from functools import cached_property

from pipeline.extraction.schemas import FilingExtraction

# Typographic characters models swap for their plain forms (and back).
_PLAIN = str.maketrans(
    {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"}
)


@dataclass(frozen=True)
class Match:
    """Where a quote lies in the source: `source[start:end]`; `how` is exact or normalised."""

    start: int
    end: int
    how: str


class Source:
    """A document's text, with its normalised form built once for many lookups."""

    def __init__(self, text: str) -> None:
        self.text = text

    @cached_property
    def _normalised(self) -> Normalised:
        return Normalised(self.text)

    def find(self, quote: str | None) -> Match | None:
        """Where `quote` lies in the text, or None when it is not there (or blank)."""
        if quote is None or not quote.strip():
            return None
        quote = quote.strip()
        at = self.text.find(quote)
        if at != -1:
            return Match(at, at + len(quote), "exact")
        needle = normalise(quote).strip()
        haystack = self._normalised
        at = haystack.text.find(needle)
        if at == -1 or not needle:
            return None
        return Match(haystack.origin(at), haystack.origin(at + len(needle) - 1) + 1, "normalised")


# Every whitespace character as a plain space, so that only runs of two or more are rewritten
# (a filing has thousands of those, against hundreds of thousands of single spaces).
_FOLD = {**_PLAIN, **{code: " " for code in range(0x3000 + 1) if chr(code).isspace() and code != 0x20}}
_LONG_SPACES = re.compile(" {2,}")


def _folded(text: str) -> str:
    return text.translate(_FOLD).lower()


def normalise(text: str) -> str:
    """Lower-cased, typographic characters plain, whitespace runs as one space."""
    return _LONG_SPACES.sub(" ", _folded(text))


class Normalised:
    """`normalise(text)`, and where each of its characters came from in `text`.

    Linear, in C for the most part: the normalised string, plus two small arrays for the
    whitespace runs longer than one character (the only places where positions shift). A text
    whose lower-casing changes its length (a few Unicode letters do) is mapped character by
    character instead.
    """

    def __init__(self, source: str) -> None:
        lowered = _folded(source)
        self.text = _LONG_SPACES.sub(" ", lowered)
        self._chars: list[int] | None = None
        self._starts = array("q")  # where each long run's space is, in the normalised text
        self._shift = array("q")  # characters removed up to and including that run
        if len(lowered) != len(source):
            self._chars = _origins_by_character(source)
            return
        removed = 0
        for run in _LONG_SPACES.finditer(lowered):
            self._starts.append(run.start() - removed)
            removed += run.end() - run.start() - 1
            self._shift.append(removed)

    def origin(self, at: int) -> int:
        """The index in the source of the normalised text's character `at`."""
        if self._chars is not None:
            return self._chars[at]
        k = bisect_right(self._starts, at) - 1
        if k < 0:
            return at
        if at == self._starts[k]:  # the run's one space: where the run began
            return at + (self._shift[k - 1] if k else 0)
        return at + self._shift[k]


def _origins_by_character(text: str) -> list[int]:
    """For each character of `normalise(text)`, its source index (lower() may turn one
    character into two)."""
    origin: list[int] = []
    in_space = False
    for index, char in enumerate(text):
        if char.isspace():
            if not in_space:
                origin.append(index)
            in_space = True
            continue
        in_space = False
        origin.extend([index] * len(char.translate(_PLAIN).lower()))
    return origin


@dataclass(frozen=True)
class QuoteCheck:
    quote: str
    match: Match | None

    @property
    def grounded(self) -> bool:
        return self.match is not None

    @property
    def start(self) -> int | None:
        return self.match.start if self.match else None

    @property
    def end(self) -> int | None:
        return self.match.end if self.match else None


@dataclass(frozen=True)
class GroundedExtraction:
    """An extraction with every quote checked against the document's text."""

    extraction: FilingExtraction
    revenue: QuoteCheck | None
    """None when there is no revenue quote to check."""
    risks: list[QuoteCheck]

    @property
    def quotes_total(self) -> int:
        return len(self.risks) + (self.revenue is not None)

    @property
    def quotes_grounded(self) -> int:
        checks = [*self.risks, *([self.revenue] if self.revenue else [])]
        return sum(check.grounded for check in checks)


def ground(extraction: FilingExtraction, source: Source) -> GroundedExtraction:
    """Check the revenue quote and every risk factor's quote against `source`."""
    revenue = None
    if extraction.revenue_quote:
        revenue = QuoteCheck(extraction.revenue_quote, source.find(extraction.revenue_quote))
    risks = [QuoteCheck(r.quote, source.find(r.quote)) for r in extraction.risk_factors]
    return GroundedExtraction(extraction, revenue, risks)


def rate(grounded: int, total: int) -> float | None:
    """The grounded share, rounded; None when there was nothing to check."""
    return round(grounded / total, 4) if total else None
