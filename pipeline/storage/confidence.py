"""A run's field confidences and its calls by stage and model, as the confidence summary of
`pipeline status` and the report reads them (columns only: a 10,000-document run loads floats,
not entities)."""

from __future__ import annotations

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from pipeline.storage.models import Extraction, LLMCall, RiskFactor


def confidences(session: Session, run_id: str) -> dict[str, list[float]]:
    """Every scored field's confidence, by kind: company, fiscal_year, revenue_usd, risk_factor."""
    found: dict[str, list[float]] = {"company": [], "fiscal_year": [], "revenue_usd": [], "risk_factor": []}
    rows = session.execute(
        select(
            Extraction.company_confidence, Extraction.fiscal_year_confidence, Extraction.revenue_confidence
        ).where(Extraction.run_id == run_id)
    ).tuples()
    for company, year, revenue in rows:
        for name, value in (("company", company), ("fiscal_year", year), ("revenue_usd", revenue)):
            if value is not None:
                found[name].append(float(value))
    risks = session.scalars(
        select(RiskFactor.confidence).where(RiskFactor.run_id == run_id, RiskFactor.confidence.is_not(None))
    )
    found["risk_factor"] = [float(v) for v in risks if v is not None]
    return found


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
