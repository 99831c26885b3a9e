"""What a run's HTML page reads beyond its totals: the stored report, each call's timing, cost
per stage or per model, the documents' timings and a custom schema's extractions."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from pipeline.core.constants import CALL_HELD
from pipeline.storage.models import Document, Extraction, LLMCall, Report

_COST_KEYS = {"stage": LLMCall.stage, "model": LLMCall.model}


def report_json(session: Session, run_id: str) -> dict[str, Any] | None:
    """The run's stored report JSON (None: no report written yet)."""
    return session.scalar(select(Report.json).where(Report.run_id == run_id))


CallOrder = Literal["sent", "queued", "held"]
_BEFORE_END_MS = {
    "sent": LLMCall.latency_ms,
    "queued": LLMCall.latency_ms + LLMCall.limiter_wait_ms,
    "held": LLMCall.limiter_wait_ms,
}
"""How long before it was recorded (it ended) a call was sent, began to wait in the limiter,
or was held by the open circuit."""


def last_sent_call(session: Session, run_id: str) -> datetime | None:
    """When the run's last sent call (not held by an open circuit) was recorded."""
    return session.scalar(
        select(func.max(LLMCall.created_at)).where(LLMCall.run_id == run_id, LLMCall.status != CALL_HELD)
    )


def call_timings(
    session: Session, run_id: str, order: CallOrder, page_rows: int = 2000
) -> Iterator[tuple[datetime, int, int, str]]:
    """The run's calls (recorded at, latency_ms, limiter_wait_ms, status), streamed in the
    order they were sent (`sent`: those not held), began to wait in the limiter (`queued`:
    those sent that waited) or were held by an open circuit (`held`); never all at once."""
    query = select(LLMCall.created_at, LLMCall.latency_ms, LLMCall.limiter_wait_ms, LLMCall.status).where(
        LLMCall.run_id == run_id
    )
    if order == "held":
        query = query.where(LLMCall.status == CALL_HELD)
    else:
        query = query.where(LLMCall.status != CALL_HELD)
    if order == "queued":
        query = query.where(LLMCall.limiter_wait_ms > 0)
    moment = _epoch_ms(session, LLMCall.created_at) - _BEFORE_END_MS[order]
    query = query.order_by(moment, LLMCall.id).execution_options(yield_per=page_rows)
    for rows in session.execute(query).tuples().partitions():
        yield from rows


def _epoch_ms(session: Session, column: Any) -> ColumnElement[Any]:
    """A timestamp as milliseconds since the epoch, to order by a moment before it."""
    if session.get_bind().dialect.name == "postgresql":
        return func.extract("epoch", column) * 1000
    return func.julianday(column) * 86_400_000.0


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


def calls_per_document(session: Session, run_id: str, document_ids: Collection[int]) -> dict[int, int]:
    """How many calls the run recorded for each of these documents (those with any)."""
    rows = session.execute(
        select(LLMCall.document_id, func.count(LLMCall.id))
        .where(LLMCall.run_id == run_id, LLMCall.document_id.in_(list(document_ids)))
        .group_by(LLMCall.document_id)
    ).tuples()
    return {document_id: n for document_id, n in rows if document_id is not None}  # the WHERE drops None


def timed_documents(
    session: Session, run_id: str, page_rows: int = 2000
) -> Iterator[tuple[int, str, str, datetime | None, datetime | None, int]]:
    """The run's documents that started and finished: (id, path, status, started_at,
    finished_at, chunk_count), streamed, never all at once."""
    query = select(
        Document.id,
        Document.path,
        Document.status,
        Document.started_at,
        Document.finished_at,
        Document.chunk_count,
    ).where(Document.run_id == run_id, Document.started_at.is_not(None), Document.finished_at.is_not(None))
    for rows in session.execute(query.execution_options(yield_per=page_rows)).tuples().partitions():
        yield from rows


def custom_rows(session: Session, run_id: str, limit: int) -> list[tuple[str, dict[str, Any]]]:
    """(path, extraction data) of the first `limit` of the run's extracted documents, by path: a
    custom schema's answers with their `_grounding` checks."""
    return [
        (str(path), dict(data))
        for path, data in session.execute(
            select(Document.path, Extraction.data)
            .join(Extraction, Extraction.document_id == Document.id)
            .where(Document.run_id == run_id, Extraction.run_id == run_id)
            .order_by(Document.path, Document.id)
            .limit(limit)
        ).tuples()
    ]


def extracted_count(session: Session, run_id: str) -> int:
    """How many of the run's documents have an extraction."""
    return int(session.scalar(select(func.count(Extraction.id)).where(Extraction.run_id == run_id)) or 0)
