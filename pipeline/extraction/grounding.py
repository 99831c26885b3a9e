"""Grounding: is a quote the model gave really in the filing, and where (pure).

A quote is looked up verbatim first, then with whitespace runs collapsed and case folded
(models re-wrap lines and change capitals). Offsets always point into the original text,
so `text[start:end]` is the passage that grounds the quote.
"""

from __future__ import annotations

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
    def _normalised(self) -> tuple[str, list[int]]:
        chars, origin = _normalise(self.text)
        return "".join(chars), origin

    def find(self, quote: str | None) -> Match | None:
        """Where `quote` lies in the text, or None when it is not there (or blank)."""
        if quote is None or not quote.strip():
            return None
        quote = quote.strip()
        at = self.text.find(quote)
        if at != -1:
            return Match(at, at + len(quote), "exact")
        needle = "".join(_normalise(quote)[0]).strip()
        haystack, origin = self._normalised
        at = haystack.find(needle)
        if at == -1 or not needle:
            return None
        return Match(origin[at], origin[at + len(needle) - 1] + 1, "normalised")


def _normalise(text: str) -> tuple[list[str], list[int]]:
    """Lower-cased characters with whitespace runs as one space, and for each the index
    of the original character it came from (lower() may turn one character into two)."""
    chars: list[str] = []
    origin: list[int] = []
    in_space = False
    for index, char in enumerate(text):
        if char.isspace():
            if not in_space:
                chars.append(" ")
                origin.append(index)
            in_space = True
            continue
        in_space = False
        for folded in char.translate(_PLAIN).lower():
            chars.append(folded)
            origin.append(index)
    return chars, origin


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
