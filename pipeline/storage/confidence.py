"""A run's field confidences per band and its calls by stage and model, as the confidence
summary of `pipeline status` and the report reads them (counted in the database)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import case, func, select, text
from sqlalchemy.orm import Session

from pipeline.storage.models import Extraction, LLMCall, RiskFactor


def band_counts(
    session: Session, run_id: str, highs: Sequence[float], threshold: float
) -> tuple[dict[str, list[int]], int]:
    """The run's scored fields per confidence band, by kind (company, fiscal_year, revenue_usd,
    risk_factor), a band holding the values under its `highs` edge (the last one the rest), and
    how many fields score under `threshold`. Counted in the database: `pipeline status --wait`
    asks every second, and a 10,000-filing run has some 150,000 scores."""
    kinds = {
        "company": (Extraction, Extraction.company_confidence),
        "fiscal_year": (Extraction, Extraction.fiscal_year_confidence),
        "revenue_usd": (Extraction, Extraction.revenue_confidence),
        "risk_factor": (RiskFactor, RiskFactor.confidence),
    }
    counts: dict[str, list[int]] = {}
    below = 0
    for table in (Extraction, RiskFactor):
        mine = {kind: column for kind, (owner, column) in kinds.items() if owner is table}
        columns: list[Any] = []
        for column in mine.values():
            columns += [_count_under(column, high) for high in highs[:-1]]
            columns += [func.count(column), _count_under(column, threshold)]
        row = session.execute(select(*columns).where(table.run_id == run_id)).one()
        per_kind = len(highs) + 1
        for k, kind in enumerate(mine):
            values = [int(v or 0) for v in row[k * per_kind : (k + 1) * per_kind]]
            under, total = values[: len(highs) - 1], values[-2]
            edges = [0, *under, total]
            counts[kind] = [edges[i + 1] - edges[i] for i in range(len(highs))]
            below += values[-1]
    return counts, below


def _count_under(column: Any, edge: float) -> Any:
    return func.sum(case((column < edge, 1), else_=0))


def escalations(session: Session, run_id: str) -> list[str]:
    """Each escalated extraction's fields the escalation model answered (comma-separated)."""
    return list(
        session.scalars(
            select(Extraction.escalated).where(Extraction.run_id == run_id, Extraction.escalated.is_not(None))
        )
    )


def calls_by_stage_and_model(
    session: Session, run_id: str
) -> list[tuple[str, str, int, int, int, float, int]]:
    """(stage, model, calls, prompt tokens, completion tokens, cost in USD, failed calls) of the
    run's calls."""
    rows = session.execute(
        select(
            LLMCall.stage,
            LLMCall.model,
            func.count(),
            func.coalesce(func.sum(LLMCall.prompt_tokens), 0),
            func.coalesce(func.sum(LLMCall.completion_tokens), 0),
            func.coalesce(func.sum(LLMCall.cost_usd), 0.0),
            func.sum(case((LLMCall.status != "ok", 1), else_=0)),
        )
        .where(LLMCall.run_id == run_id)
        .group_by(LLMCall.stage, LLMCall.model)
        .order_by(LLMCall.stage, LLMCall.model)
    ).tuples()
    return [
        (s, m, int(n), int(p), int(c), float(cost or 0.0), int(bad or 0)) for s, m, n, p, c, cost, bad in rows
    ]


XBRL_VERDICTS = ("agrees", "differs", "no answer", "no fact", "not extracted")


def xbrl_verdicts(session: Session, run_id: str) -> dict[str, int]:
    """The run's revenues against the filings' own inline-XBRL facts: documents per verdict of
    the `revenue_checks` view (agrees, differs, no answer, no fact, not extracted)."""
    rows = session.execute(
        text("select verdict, count(*) from revenue_checks where run_id = :run group by verdict"),
        {"run": run_id},
    )
    found = {str(verdict): int(n) for verdict, n in rows.tuples()}
    return {verdict: found.get(verdict, 0) for verdict in XBRL_VERDICTS}
