"""What a run's HTML page reads beyond its totals: the stored report, each call's timing, cost
per stage or per model, the documents' timings and a custom schema's extractions."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pipeline.storage.models import Document, Extraction, LLMCall, Report

_COST_KEYS = {"stage": LLMCall.stage, "model": LLMCall.model}


def report_json(session: Session, run_id: str) -> dict[str, Any] | None:
    """The run's stored report JSON (None: no report written yet)."""
    return session.scalar(select(Report.json).where(Report.run_id == run_id))


def call_timings(session: Session, run_id: str) -> list[tuple[datetime, int, int, str]]:
    """Each of the run's calls: (recorded at, latency_ms, limiter_wait_ms, status)."""
    return list(
        session.execute(
            select(LLMCall.created_at, LLMCall.latency_ms, LLMCall.limiter_wait_ms, LLMCall.status).where(
                LLMCall.run_id == run_id
            )
        ).tuples()
    )


def costs_by(
    session: Session, run_id: str, key: Literal["stage", "model"]
) -> list[tuple[str, int, int, int, float | None]]:
    """The run's calls grouped by stage or by model, in its order: (key, calls, prompt tokens,
    completion tokens, cost in USD; None when none of them was priced)."""
    column = _COST_KEYS[key]
    rows = session.execute(
        select(
            column,
            func.count(LLMCall.id),
            func.coalesce(func.sum(LLMCall.prompt_tokens), 0),
            func.coalesce(func.sum(LLMCall.completion_tokens), 0),
            func.sum(LLMCall.cost_usd),
        )
        .where(LLMCall.run_id == run_id)
        .group_by(column)
        .order_by(column)
    ).tuples()
    return list(rows)


def calls_per_document(session: Session, run_id: str) -> dict[int, int]:
    """How many calls the run recorded for each of its documents (those with any)."""
    rows = session.execute(
        select(LLMCall.document_id, func.count(LLMCall.id))
        .where(LLMCall.run_id == run_id, LLMCall.document_id.is_not(None))
        .group_by(LLMCall.document_id)
    ).tuples()
    return {document_id: n for document_id, n in rows if document_id is not None}  # the WHERE drops None


def timed_documents(
    session: Session, run_id: str
) -> list[tuple[int, str, str, datetime | None, datetime | None, int]]:
    """The run's documents that started and finished: (id, path, status, started_at,
    finished_at, chunk_count)."""
    return list(
        session.execute(
            select(
                Document.id,
                Document.path,
                Document.status,
                Document.started_at,
                Document.finished_at,
                Document.chunk_count,
            ).where(
                Document.run_id == run_id, Document.started_at.is_not(None), Document.finished_at.is_not(None)
            )
        ).tuples()
    )


def custom_rows(session: Session, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, extraction data) of the run's extracted documents, by path: a custom schema's
    answers with their `_grounding` checks."""
    return [
        (str(path), dict(data))
        for path, data in session.execute(
            select(Document.path, Extraction.data)
            .join(Extraction, Extraction.document_id == Document.id)
            .where(Document.run_id == run_id)
            .order_by(Document.path, Document.id)
        ).tuples()
    ]
