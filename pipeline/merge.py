"""Merging the answers of a document's chunks into one extraction (pure)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TypeVar

from pipeline.constants import MAX_RISK_FACTORS_PER_DOCUMENT
from pipeline.schemas import FilingExtraction, RiskFactor

T = TypeVar("T")


def merge_chunks(parts: Sequence[FilingExtraction]) -> FilingExtraction:
    """One extraction from the chunks' extractions, in document order.

    Scalars take the value most chunks agree on (the earliest on a tie); revenue keeps the
    first figure stated with its quote; risk factors are de-duplicated (overlapping chunks
    repeat them) and capped.
    """
    revenue = next((p for p in parts if p.revenue_usd is not None and p.revenue_quote), None)
    revenue = revenue or next((p for p in parts if p.revenue_usd is not None), None)
    return FilingExtraction(
        company=_most_common([p.company for p in parts]),
        fiscal_year=_most_common([p.fiscal_year for p in parts]),
        revenue_usd=revenue.revenue_usd if revenue else None,
        revenue_quote=revenue.revenue_quote if revenue else None,
        risk_factors=_unique_risks(r for p in parts for r in p.risk_factors),
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


def _unique_risks(risks: Iterable[RiskFactor]) -> list[RiskFactor]:
    seen: set[str] = set()
    unique: list[RiskFactor] = []
    for risk in risks:
        keys = {_key(risk.title), _key(risk.quote)}
        if keys & seen:
            continue
        seen |= keys
        unique.append(risk)
        if len(unique) == MAX_RISK_FACTORS_PER_DOCUMENT:
            break
    return unique
