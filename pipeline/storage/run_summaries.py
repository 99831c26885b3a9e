"""The newest runs' totals in one statement: what `pipeline runs` lists.

Each total is grouped over the listed runs' rows only (their ids, through the tables' run_id
indexes), so the read grows with the runs it lists, not with the database's age. The figures
are those `pipeline status` reads for one run (`pipeline.runs.status.run_status`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session

from pipeline.core.constants import CALL_HELD
from pipeline.storage.llm_calls import CallTotals
from pipeline.storage.models import Chunk, DocStatus, Document, Extraction, LLMCall, Report, Run
from pipeline.storage.retention import kept_totals

_STATUSES = tuple(DocStatus)


@dataclass
class RunSummary:
    run: Run
    calls: CallTotals
    """A pruned run's: those it kept from before the prune, as its chunks."""
    documents: dict[str, int] = field(default_factory=dict)
    """Documents per status (statuses with none are left out, as `status_counts` does)."""
    flagged: int = 0
    batch: tuple[int, float, float] = (0, 0.0, 0.0)
    """As `batches.batch_totals`: calls at batch prices, their cost, the same at sync prices."""
    chunks: tuple[int, int] = (0, 0)
    """Chunks, and chunks answered."""
    quotes: tuple[int, int] = (0, 0)
    """Quotes, and quotes grounded."""
    has_report: bool = False


def newest_summaries(session: Session, limit: int) -> list[RunSummary]:
    """The `limit` runs created last, newest first, each with its totals: their ids (from the
    end of the created_at index), then one statement for all of them. The ids are bound as
    values: a subquery in their place let Postgres hash every run's rows (10x the pages at
    10x the database)."""
    listed = list(session.scalars(select(Run.id).order_by(Run.created_at.desc()).limit(limit)))
    if not listed:
        return []
    sent = LLMCall.status != CALL_HELD
    batch_mode = LLMCall.mode.in_(("batch", "flex"))
    docs = (
        select(
            Document.run_id,
            *(func.count().filter(Document.status == s).label(f"d_{s}") for s in _STATUSES),
            func.count().filter(Document.injection_flag).label("flagged"),
        )
        .where(Document.run_id.in_(listed))
        .group_by(Document.run_id)
        .subquery("docs")
    )
    calls = (
        select(
            LLMCall.run_id,
            func.count(LLMCall.id).filter(sent).label("calls"),
            func.count(LLMCall.id).filter(sent, LLMCall.status != "ok").label("failed"),
            func.count(LLMCall.id).filter(LLMCall.status == CALL_HELD).label("held"),
            func.coalesce(func.sum(LLMCall.prompt_tokens), 0).label("prompt"),
            func.coalesce(func.sum(LLMCall.completion_tokens), 0).label("completion"),
            func.coalesce(func.sum(LLMCall.cached_tokens), 0).label("cached"),
            func.sum(LLMCall.cost_usd).label("cost"),
            func.count(LLMCall.cost_usd).label("priced"),
            func.count(LLMCall.id).filter(batch_mode).label("batch_calls"),
            func.coalesce(func.sum(LLMCall.cost_usd).filter(batch_mode), 0.0).label("batch_cost"),
            func.coalesce(func.sum(LLMCall.sync_cost_usd).filter(batch_mode), 0.0).label("batch_sync"),
        )
        .where(LLMCall.run_id.in_(listed))
        .group_by(LLMCall.run_id)
        .subquery("calls")
    )
    chunks = (
        select(Chunk.run_id, func.count().label("chunks"), func.count(Chunk.completed_at).label("done"))
        .where(Chunk.run_id.in_(listed))
        .group_by(Chunk.run_id)
        .subquery("chunks")
    )
    quotes = (
        select(
            Extraction.run_id,
            func.coalesce(func.sum(Extraction.quotes_total), 0).label("quotes"),
            func.coalesce(func.sum(Extraction.quotes_grounded), 0).label("grounded"),
        )
        .where(Extraction.run_id.in_(listed))
        .group_by(Extraction.run_id)
        .subquery("quotes")
    )
    reports = select(Report.run_id).where(Report.run_id.in_(listed)).subquery("reports")
    rows = session.execute(
        select(Run, docs, calls, chunks, quotes, reports.c.run_id.label("report_of"))
        .outerjoin(docs, docs.c.run_id == Run.id)
        .outerjoin(calls, calls.c.run_id == Run.id)
        .outerjoin(chunks, chunks.c.run_id == Run.id)
        .outerjoin(quotes, quotes.c.run_id == Run.id)
        .outerjoin(reports, reports.c.run_id == Run.id)
        .where(Run.id.in_(listed))
        .order_by(Run.created_at.desc())
    ).all()
    return [_summary(row) for row in rows]


def _summary(row: Row[Any]) -> RunSummary:
    m = row._mapping
    run: Run = m[Run]
    cost = m["cost"]
    calls = CallTotals(
        calls=int(m["calls"] or 0),
        prompt_tokens=int(m["prompt"] or 0),
        completion_tokens=int(m["completion"] or 0),
        cost_usd=None if cost is None else round(float(cost), 6),
        priced_calls=int(m["priced"] or 0),
        failed_calls=int(m["failed"] or 0),
        held_calls=int(m["held"] or 0),
        cached_tokens=int(m["cached"] or 0),
    )
    chunks = (int(m["chunks"] or 0), int(m["done"] or 0))
    kept = kept_totals(run.pruned)
    if kept:  # a pruned run's call and chunk rows are gone: the totals it kept stand
        calls, chunks = kept[0], (kept[1], kept[2])
    return RunSummary(
        run=run,
        documents={str(s): int(m[f"d_{s}"]) for s in _STATUSES if m[f"d_{s}"]},
        flagged=int(m["flagged"] or 0),
        calls=calls,
        batch=(int(m["batch_calls"] or 0), float(m["batch_cost"] or 0.0), float(m["batch_sync"] or 0.0)),
        chunks=chunks,
        quotes=(int(m["quotes"] or 0), int(m["grounded"] or 0)),
        has_report=m["report_of"] is not None,
    )
