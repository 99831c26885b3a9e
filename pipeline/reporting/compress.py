"""Compress: a short summary of each extraction, by the LLM, from its grounded facts only."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from pipeline.context import Context, check_spend, database_url, spending, stop_check
from pipeline.core.constants import DEFAULT_COMPRESS_MAX_TOKENS
from pipeline.core.errors import PipelineError, UnknownToDatabase
from pipeline.extraction import custom
from pipeline.extraction.extract import CustomResult
from pipeline.extraction.grounding import GroundedExtraction
from pipeline.llm import prompts, stops
from pipeline.llm.client import CallRecord
from pipeline.reporting import render
from pipeline.storage import extractions, llm_calls, reports
from pipeline.storage.db import session_scope

log = logging.getLogger(__name__)
CUSTOM_FALLBACK_CHARS = 600
"""A custom schema's stored JSON, cut to this, stands in for a summary the LLM did not give."""


def compress_document(
    ctx: Context,
    document_id: int,
    failed_attempts: int = 0,
    *,
    guard: Callable[[], None] | None = None,
    without_llm: bool = False,
) -> str:
    """Store a short summary of the stored extraction of a document that has none (finalize:
    its extraction task's own summary failed); idempotent. `guard()` runs before the write
    and raises when the step's lease was lost. `without_llm`: the compress gave up: the summary
    is made from the stored facts, and stored too, so that no later finalize pays for it again."""
    with session_scope(ctx.engine) as session:
        row = extractions.to_summarize(session, document_id)
        if row is None:
            if not extractions.document_exists(session, document_id):  # another database than the producer's
                raise UnknownToDatabase(f"document {document_id}", database_url(ctx.engine))
            return "missing"
        extraction, query, budget, schema = row
        if extraction.summary:
            return "done"
        if schema:  # a user's schema: its JSON, ungrounded quotes removed
            facts = custom.without_ungrounded(extraction.data)
        else:
            risks = extractions.grounded_risks(session, document_id)
            facts = trusted_facts(
                extraction.company,
                extraction.fiscal_year,
                extraction.revenue_usd if extraction.revenue_grounded is not False else None,
                extraction.revenue_quote if extraction.revenue_grounded is not False else None,
                [(title, quote) for title, quote in risks],
            )
    if without_llm:
        return _store(ctx, document_id, _from_facts(facts, bool(schema)), guard)
    run_id = extraction.run_id
    calls: list[CallRecord] = []
    sink: Callable[[CallRecord], None] = calls.append
    if budget is not None:
        check_spend(ctx, run_id)
        sink = spending(ctx, run_id, calls.append)
    try:
        with stops.checked_by(stop_check(ctx, run_id)):  # a cancelled run's is not asked for
            summary = _summary(ctx, query, facts, bool(schema), sink, failed_attempts)
    finally:
        with session_scope(ctx.engine) as session:
            llm_calls.record_calls(session, extraction.run_id, document_id, None, calls)
    return _store(ctx, document_id, summary, guard)


def _store(ctx: Context, document_id: int, summary: str, guard: Callable[[], None] | None) -> str:
    if guard is not None:
        guard()
    with session_scope(ctx.engine) as session:
        reports.save_summary(session, document_id, summary)
    return "done"


def summarize(
    ctx: Context, query: str, result: GroundedExtraction | CustomResult, sink: Callable[[CallRecord], None]
) -> str | None:
    """The summary of a document's grounded result, still in memory (its extraction task calls
    this before its one closing write), its calls handed to `sink`; None when the call failed
    (finalize compresses the stored extraction then). Never raises for the LLM."""
    if isinstance(result, CustomResult):
        facts, own_schema = custom.without_ungrounded(result.data), True
    else:
        e = result.extraction
        revenue_ok = result.revenue is None or result.revenue.grounded
        grounded = [
            (r.title, r.quote)
            for r, check in zip(e.risk_factors, result.risks, strict=True)
            if check.grounded
        ]
        facts = trusted_facts(
            e.company,
            e.fiscal_year,
            e.revenue_usd if revenue_ok else None,
            e.revenue_quote if revenue_ok else None,
            grounded,
        )
        own_schema = False
    try:
        return _summary(ctx, query, facts, own_schema, sink)
    except PipelineError as exc:
        log.info("summary left to finalize: %s", exc)
        return None


def _summary(
    ctx: Context,
    query: str,
    facts: dict[str, Any],
    own_schema: bool,
    sink: Callable[[CallRecord], None],
    failed_attempts: int = 0,
) -> str:
    """The LLM's summary of `facts`; an empty answer falls back to one made from the facts."""
    summary = ctx.llm.text(
        prompts.compress_messages(query, facts),
        stage="compress",
        max_tokens=DEFAULT_COMPRESS_MAX_TOKENS,
        sink=sink,
        model=ctx.llm.pick_model("compress", failed_attempts),
    )
    return summary or _from_facts(facts, own_schema)


def _from_facts(facts: dict[str, Any], own_schema: bool) -> str:
    """The summary made without the LLM: the facts' JSON, or a sentence built from them."""
    if own_schema:
        return json.dumps(facts, ensure_ascii=False)[:CUSTOM_FALLBACK_CHARS]
    titles = [r["title"] for r in facts["risk_factors"]]
    return fallback_summary(facts["company"], facts["fiscal_year"], facts["revenue_usd"], titles)


def trusted_facts(
    company: str | None,
    fiscal_year: int | None,
    revenue_usd: float | None,
    revenue_quote: str | None,
    grounded_risks: list[tuple[str, str]],
) -> dict[str, Any]:
    """What the summary may state as fact: only facts whose quote was found in the filing (the
    caller leaves out a revenue whose quote was not)."""
    return {
        "company": company,
        "fiscal_year": fiscal_year,
        "revenue_usd": revenue_usd,
        "revenue_quote": revenue_quote,
        "risk_factors": [{"title": title, "quote": quote} for title, quote in grounded_risks],
    }


def fallback_summary(
    company: str | None, fiscal_year: int | None, revenue_usd: float | None, risk_titles: list[str]
) -> str:
    """A summary built from the stored fields, for when the LLM cannot give one."""
    risks = "; ".join(risk_titles[:3])
    return (
        f"{company or 'Unknown company'}, fiscal {fiscal_year or '?'}: "
        f"revenue {render.money(revenue_usd) or 'not stated'}; risks: {risks or 'none stated'}."
    )
