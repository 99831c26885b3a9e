"""The reduce side: compress each extraction, synthesize the run's report, store it."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from pipeline.core.constants import DEFAULT_COMPRESS_MAX_TOKENS, DEFAULT_SYNTHESIZE_MAX_TOKENS
from pipeline.extraction import custom, grounding
from pipeline.extraction.extract import Context
from pipeline.llm import prompts
from pipeline.llm.client import CallRecord
from pipeline.reporting import render
from pipeline.reporting.reduce import reduce_to_one
from pipeline.runs.status import run_status
from pipeline.storage import llm_calls, reports
from pipeline.storage.db import session_scope
from pipeline.storage.models import Document, Extraction, RiskFactor, Run, RunStatus

PROMPT_OVERHEAD_TOKENS = 400
CUSTOM_FALLBACK_CHARS = 600
"""A custom schema's stored JSON, cut to this, stands in for a summary the LLM did not give."""


def compress_document(ctx: Context, document_id: int, failed_attempts: int = 0) -> str:
    """Store a short summary of the document's extraction, by the LLM; idempotent."""
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
    save_summary(ctx, document_id, summary)
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


def save_summary(ctx: Context, document_id: int, summary: str) -> None:
    with session_scope(ctx.engine) as session:
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


def synthesize_run(
    ctx: Context, run_id: str, *, answer: str | None = None, failed_attempts: int = 0
) -> RunStatus:
    """Write the run's report (idempotent) and close the run.

    The answer is synthesized from the stored summaries, hierarchically when they exceed
    the context budget. Passing `answer` skips the LLM (used when synthesis failed for good).
    """
    with session_scope(ctx.engine) as session:
        run = session.get(Run, run_id)
        if run is None:
            raise LookupError(f"no run {run_id}")
        # Columns, not entities: a 10,000-document run must not load every extraction's JSON.
        rows = session.execute(
            select(
                Document.id,
                Document.path,
                Document.status,
                Document.error,
                Extraction.document_id,
                Extraction.company,
                Extraction.fiscal_year,
                Extraction.revenue_usd,
                Extraction.revenue_grounded,
                Extraction.quotes_total,
                Extraction.quotes_grounded,
                Extraction.summary,
                Document.injection_excerpt,
            )
            .outerjoin(Extraction, Extraction.document_id == Document.id)
            .where(Document.run_id == run_id)
            .order_by(Document.path, Document.id)
        ).all()
        risks = session.execute(
            select(RiskFactor.document_id, RiskFactor.title, RiskFactor.grounded)
            .where(RiskFactor.run_id == run_id)
            .order_by(RiskFactor.document_id, RiskFactor.position)
        ).all()
    titles: dict[int, list[str]] = {}
    unverified: dict[int, list[str]] = {}
    for document_id, title, grounded in risks:
        (titles if grounded else unverified).setdefault(document_id, []).append(title)
    levels = 0
    if answer is None:
        summaries = [
            r.summary
            or fallback_summary(
                r.company,
                r.fiscal_year,
                r.revenue_usd if r.revenue_grounded is not False else None,
                titles.get(r.id, []),
            )
            for r in rows
            if r.document_id is not None
        ]
        answer, levels = _synthesize(ctx, run, summaries, ctx.llm.pick_model("synthesize", failed_attempts))
    documents = [
        render.DocumentRow(
            path=r.path,
            status=r.status,
            error=r.error,
            company=r.company,
            fiscal_year=r.fiscal_year,
            revenue_usd=r.revenue_usd,
            revenue_grounded=r.revenue_grounded,
            risk_titles=titles.get(r.id, []),
            unverified_risk_titles=unverified.get(r.id, []),
            quotes_total=r.quotes_total or 0,
            quotes_grounded=r.quotes_grounded or 0,
            injection_excerpt=r.injection_excerpt,
        )
        for r in rows
    ]
    view = run_status(ctx.engine, run_id)
    failure = run_failure(view.documents, ctx.settings.run_failure_threshold)
    totals = {
        "documents": view.documents,
        "llm_calls": view.llm_calls,
        "tokens": view.prompt_tokens + view.completion_tokens,
        "prompt_tokens": view.prompt_tokens,
        "completion_tokens": view.completion_tokens,
        "grounding": {
            "quotes_total": view.quotes_total,
            "quotes_grounded": view.quotes_grounded,
            "rate": grounding.rate(view.quotes_grounded, view.quotes_total),
        },
        "injection_flagged": view.injection_flagged,
    }
    report = render.ReportInput(
        run_id=run.id,
        name=run.name,
        query=run.query,
        model=run.model,
        simulated=run.simulated,
        answer=answer,
        synthesis_levels=levels,
        documents=documents,
        totals=totals,
        failure=failure,
    )
    status = RunStatus.FAILED if failure else RunStatus.COMPLETED
    with session_scope(ctx.engine) as session:
        reports.save_report(session, run_id, render.markdown(report), render.as_json(report), status, failure)
    return status


def run_failure(documents: dict[str, int], threshold: float) -> str | None:
    """Why the run counts as failed: more than `threshold` of its documents failed."""
    total = sum(documents.values())
    failed = documents.get("failed", 0)
    if total and failed / total > threshold:
        return f"{failed} of {total} documents failed, over the {threshold:.0%} threshold"
    return None


def _synthesize(ctx: Context, run: Run, summaries: list[str], model: str) -> tuple[str, int]:
    budget = ctx.settings.context_budget_tokens - DEFAULT_SYNTHESIZE_MAX_TOKENS - PROMPT_OVERHEAD_TOKENS

    def synthesize(batch: list[str]) -> str:
        if run.budget_usd is not None:
            with session_scope(ctx.engine) as session:
                llm_calls.check_budget(session, run.id)
        calls: list[CallRecord] = []
        try:
            return ctx.llm.text(
                prompts.synthesize_messages(run.query, batch),
                stage="synthesize",
                max_tokens=DEFAULT_SYNTHESIZE_MAX_TOKENS,
                sink=calls.append,
                model=model,
            )
        finally:
            with session_scope(ctx.engine) as session:
                llm_calls.record_calls(session, run.id, None, None, calls)

    return reduce_to_one(summaries, max(budget, 200), synthesize)
