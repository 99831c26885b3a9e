"""Merging the answers of a document's chunks into one extraction (pure)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from pipeline.core.constants import MAX_RISK_FACTORS_PER_DOCUMENT
from pipeline.extraction.schemas import FilingExtraction, RiskFactor

T = TypeVar("T")


def merge_chunks(
    parts: Sequence[FilingExtraction], in_source: Callable[[str], bool] | None = None
) -> FilingExtraction:
    """One extraction from the chunks' extractions, in document order.

    Scalars take the value most chunks agree on (the earliest on a tie); revenue keeps the
    first figure stated with its quote; risk factors are de-duplicated (overlapping chunks
    repeat them) and capped. With `in_source` (is this quote in the filing?), a figure or
    risk whose quote is found wins over one stated earlier with a quote that is not.
    """
    found = in_source or (lambda _: True)
    stated = [p for p in parts if p.revenue_usd is not None]
    revenue = next((p for p in stated if p.revenue_quote and found(p.revenue_quote)), None)
    revenue = revenue or next((p for p in stated if p.revenue_quote), None)
    revenue = revenue or next(iter(stated), None)
    return FilingExtraction(
        company=_most_common([p.company for p in parts]),
        fiscal_year=_most_common([p.fiscal_year for p in parts]),
        revenue_usd=revenue.revenue_usd if revenue else None,
        revenue_quote=revenue.revenue_quote if revenue else None,
        risk_factors=_unique_risks((r for p in parts for r in p.risk_factors), found),
    )


def _most_common(values: Sequence[T | None]) -> T | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    counts = Counter(present)
    best = max(counts.values())
    return next(v for v in present if counts[v] == best)


def _key(text: str) -> str:
    return re.sub(r"\W+", " ", text).strip().lower()


def risk_key(risk: RiskFactor) -> set[str]:
    """What makes two risk factors the same one: an equal title or an equal quote (normalised)."""
    return {_key(risk.title), _key(risk.quote)}


def _unique_risks(risks: Iterable[RiskFactor], found: Callable[[str], bool]) -> list[RiskFactor]:
    """First of each title or quote, except that a grounded repeat replaces an ungrounded one."""
    unique: list[RiskFactor] = []
    grounded: list[bool] = []
    owner: dict[str, int] = {}  # title or quote key -> position in `unique`
    for risk in risks:
        keys = risk_key(risk)
        seen = [owner[k] for k in keys if k in owner]
        if seen:
            at = min(seen)
            if not grounded[at] and found(risk.quote):
                unique[at], grounded[at] = risk, True
                owner.update(dict.fromkeys(keys, at))
            continue
        if len(unique) == MAX_RISK_FACTORS_PER_DOCUMENT:
            continue
        owner.update(dict.fromkeys(keys, len(unique)))
        unique.append(risk)
        grounded.append(found(risk.quote))
    return unique
