"""Compress: a short summary of each extraction, by the LLM, from its grounded facts only."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from pipeline.core.constants import DEFAULT_COMPRESS_MAX_TOKENS
from pipeline.extraction import custom
from pipeline.extraction.extract import Context
from pipeline.llm import prompts
from pipeline.llm.client import CallRecord
from pipeline.reporting import render
from pipeline.storage import documents, llm_calls, reports
from pipeline.storage.db import session_scope
from pipeline.storage.models import Extraction, RiskFactor, Run

CUSTOM_FALLBACK_CHARS = 600
"""A custom schema's stored JSON, cut to this, stands in for a summary the LLM did not give."""


def compress_document(
    ctx: Context,
    document_id: int,
    failed_attempts: int = 0,
    *,
    fence: int | None = None,
    guard: Callable[[], None] | None = None,
) -> str:
    """Store a short summary of the document's extraction, by the LLM; idempotent. Under a
    document's lease (`fence`), the summary is written only while the lease holds; `guard()`
    runs before the write and raises when a step lease was lost."""
    with session_scope(ctx.engine) as session:
        row = session.execute(
            select(Extraction, Run.query, Run.budget_usd, Run.schema)
            .join(Run, Run.id == Extraction.run_id)
            .where(Extraction.document_id == document_id)
        ).one_or_none()
        if row is None:
            return "missing"
        extraction, query, budget, schema = row
        if extraction.summary:
            return "done"
        if schema:  # a user's schema: its JSON, ungrounded quotes removed
            facts = custom.without_ungrounded(extraction.data)
        else:
            risks = session.execute(
                select(RiskFactor.title, RiskFactor.quote)
                .where(RiskFactor.document_id == document_id, RiskFactor.grounded)
                .order_by(RiskFactor.position)
            ).all()
            facts = trusted_facts(extraction, [(title, quote) for title, quote in risks])
    if budget is not None:
        with session_scope(ctx.engine) as session:
            llm_calls.check_budget(session, extraction.run_id)
    calls: list[CallRecord] = []
    try:
        summary = ctx.llm.text(
            prompts.compress_messages(query, facts),
            stage="compress",
            max_tokens=DEFAULT_COMPRESS_MAX_TOKENS,
            sink=calls.append,
            model=ctx.llm.pick_model("compress", failed_attempts),
        )
    finally:
        with session_scope(ctx.engine) as session:
            llm_calls.record_calls(session, extraction.run_id, document_id, None, calls)
    if not summary and schema:
        summary = json.dumps(facts, ensure_ascii=False)[:CUSTOM_FALLBACK_CHARS]
    elif not summary:
        titles = [r["title"] for r in facts["risk_factors"]]
        summary = fallback_summary(extraction.company, extraction.fiscal_year, facts["revenue_usd"], titles)
    if guard is not None:
        guard()
    save_summary(ctx, document_id, summary, fence)
    return "done"


def trusted_facts(extraction: Extraction, grounded_risks: list[tuple[str, str]]) -> dict[str, Any]:
    """What the summary may state as fact: only facts whose quote was found in the filing."""
    revenue_ok = extraction.revenue_grounded is not False
    return {
        "company": extraction.company,
        "fiscal_year": extraction.fiscal_year,
        "revenue_usd": extraction.revenue_usd if revenue_ok else None,
        "revenue_quote": extraction.revenue_quote if revenue_ok else None,
        "risk_factors": [{"title": title, "quote": quote} for title, quote in grounded_risks],
    }


def save_summary(ctx: Context, document_id: int, summary: str, fence: int | None = None) -> None:
    with session_scope(ctx.engine) as session:
        if fence is not None:
            documents.hold(session, document_id, fence)
        reports.save_summary(session, document_id, summary)


def fallback_summary(
    company: str | None, fiscal_year: int | None, revenue_usd: float | None, risk_titles: list[str]
) -> str:
    """A summary built from the stored fields, for when the LLM cannot give one."""
    risks = "; ".join(risk_titles[:3])
    return (
        f"{company or 'Unknown company'}, fiscal {fiscal_year or '?'}: "
        f"revenue {render.money(revenue_usd) or 'not stated'}; risks: {risks or 'none stated'}."
    )
