"""A run's provider batches (`llm_batches`) and the chunks they carry.

A batch row is written before anything depends on it: first with its chunks (`preparing`), then
with its uploaded input file (`uploaded`), then with the provider's batch id and statuses. A
crash between two steps leaves a row that says what to do next, and the chunks it holds are not
sent in another batch meanwhile. A chunk's answer from an output line is stored only where the
chunk holds none for this prompt yet, in the same transaction as its call record: a line is
never stored, or paid for, twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, exists, func, or_, select, update
from sqlalchemy.orm import Session

from pipeline.storage import clock, documents, llm_calls
from pipeline.storage.fit import json_safe
from pipeline.storage.models import (
    Chunk,
    Content,
    DocStatus,
    Document,
    LLMBatch,
    LLMCall,
    Run,
    aware,
)

PREPARING = "preparing"
UPLOADED = "uploaded"
INGESTED = "ingested"
"""Our own statuses: before the provider has the batch, and once its files are read."""
WAITING = ("validating", "in_progress", "finalizing", "cancelling")


def unanswered(version: str) -> Any:
    """Chunks without an answer to this prompt version."""
    return or_(Chunk.result.is_(None), Chunk.prompt_version.is_(None), Chunk.prompt_version != version)


@dataclass(frozen=True)
class Pending:
    """A chunk to send, with its document's text."""

    chunk: Chunk
    document: Document
    text: str


def pending_chunks(
    session: Session,
    run_id: str,
    version: str,
    max_tries: int,
    *,
    reuse_models: Sequence[str] | None = None,
    documents_per_query: int = 50,
) -> Iterator[Pending]:
    """The run's unanswered chunks that no batch holds and that have batch tries left, document
    by document (a run's texts are never all in memory at once). With `reuse_models`, chunks an
    earlier run answered for the same text are filled from it first, and not sent."""
    last = 0
    while True:
        docs = list(
            session.scalars(
                select(Document)
                .where(
                    Document.run_id == run_id,
                    Document.status == DocStatus.PENDING,
                    Document.id > last,
                )
                .order_by(Document.id)
                .limit(documents_per_query)
            )
        )
        if not docs:
            return
        last = docs[-1].id
        chunks = session.scalars(
            select(Chunk)
            .where(
                Chunk.document_id.in_([d.id for d in docs]),
                Chunk.batch_id.is_(None),
                Chunk.batch_tries < max_tries,
                unanswered(version),
            )
            .order_by(Chunk.document_id, Chunk.idx)
        ).all()
        by_doc: dict[int, list[Chunk]] = {}
        for chunk in chunks:
            by_doc.setdefault(chunk.document_id, []).append(chunk)
        texts = _texts(session, {d.sha256 for d in docs if d.id in by_doc and d.sha256})
        for doc in docs:
            mine = by_doc.get(doc.id, [])
            if reuse_models is not None and mine:
                documents.reuse_answers(session, doc, mine, reuse_models, version)
            for chunk in mine:
                if chunk.result is None or chunk.prompt_version != version:  # not reused just now
                    yield Pending(chunk, doc, texts[doc.sha256 or ""])


def unfinished_documents(session: Session, run_id: str) -> list[int]:
    """The run's documents not yet final, most chunks first."""
    return list(
        session.scalars(
            select(Document.id)
            .where(Document.run_id == run_id, Document.status.in_((DocStatus.PENDING, DocStatus.RUNNING)))
            .order_by(Document.chunk_count.desc(), Document.id)
        )
    )


def chunks_of_batch(session: Session, batch_id: int) -> list[Pending]:
    """The chunks a batch row holds, with their texts (to build its input file again)."""
    rows = session.execute(
        select(Chunk, Document)
        .join(Document, Document.id == Chunk.document_id)
        .where(Chunk.batch_id == batch_id)
        .order_by(Chunk.document_id, Chunk.idx)
    ).all()
    texts = _texts(session, {d.sha256 for _, d in rows if d.sha256})
    return [Pending(chunk, doc, texts[doc.sha256 or ""]) for chunk, doc in rows]


def _texts(session: Session, hashes: set[str]) -> dict[str, str]:
    rows = session.execute(select(Content.sha256, Content.text).where(Content.sha256.in_(hashes))).tuples()
    return {sha256: text for sha256, text in rows if text is not None}  # None: pruned


def still_to_send(session: Session, run_id: str, version: str, max_tries: int) -> int:
    """The run's unanswered chunks no batch holds and with batch tries left."""
    return int(
        session.scalar(
            select(func.count())
            .select_from(Chunk)
            .join(Document, Document.id == Chunk.document_id)
            .where(
                Document.run_id == run_id,
                Document.status == DocStatus.PENDING,
                Chunk.batch_id.is_(None),
                Chunk.batch_tries < max_tries,
                unanswered(version),
            )
        )
        or 0
    )


def remaining_work(session: Session, run_id: str, version: str) -> tuple[int, int, int]:
    """(unanswered chunks, their estimated tokens, documents) the synchronous path would have
    left to do if it took over now."""
    row = session.execute(
        select(func.count(Chunk.id), func.coalesce(func.sum(Chunk.token_estimate), 0))
        .join(Document, Document.id == Chunk.document_id)
        .where(Document.run_id == run_id, unanswered(version))
    ).one()
    documents = session.scalar(
        select(func.count())
        .select_from(Document)
        .where(Document.run_id == run_id, Document.status != DocStatus.SKIPPED)
    )
    return int(row[0]), int(row[1]), int(documents or 0)


def create(
    session: Session,
    run_id: str,
    chunk_ids: Sequence[int],
    tokens: int,
    estimated_cost_usd: float | None = None,
) -> LLMBatch:
    """A batch row holding these chunks (`preparing`): they go in no other batch meanwhile."""
    row = LLMBatch(
        run_id=run_id,
        status=PREPARING,
        requests=len(chunk_ids),
        enqueued_tokens=tokens,
        estimated_cost_usd=estimated_cost_usd,
    )
    session.add(row)
    session.flush()
    session.execute(
        update(Chunk)
        .where(Chunk.id.in_(chunk_ids))
        .values(batch_id=row.id, batch_tries=Chunk.batch_tries + 1)
        .execution_options(synchronize_session=False)
    )
    return row


def filename(row: LLMBatch) -> str:
    return f"pipeline-{row.run_id}-batch-{row.id}.jsonl"


def open_batches(session: Session, run_id: str) -> list[LLMBatch]:
    """The run's batches not yet ingested, oldest first."""
    return list(
        session.scalars(
            select(LLMBatch)
            .where(LLMBatch.run_id == run_id, LLMBatch.status != INGESTED)
            .order_by(LLMBatch.id)
        )
    )


def of_run(session: Session, run_id: str) -> list[LLMBatch]:
    return list(session.scalars(select(LLMBatch).where(LLMBatch.run_id == run_id).order_by(LLMBatch.id)))


def enqueued_tokens(session: Session, run_id: str) -> int:
    """Tokens of the run's batches the provider still holds (its enqueued-token limit)."""
    return int(
        session.scalar(
            select(func.coalesce(func.sum(LLMBatch.enqueued_tokens), 0)).where(
                LLMBatch.run_id == run_id, LLMBatch.status.in_((UPLOADED, *WAITING))
            )
        )
        or 0
    )


def budget_room(session: Session, run_id: str) -> tuple[float, float] | None:
    """(what the run's budget has left beyond its recorded cost and its open batches' estimates,
    those estimates); None: the run has no budget."""
    budget, spent = session.execute(select(Run.budget_usd, Run.cost_usd).where(Run.id == run_id)).one()
    if budget is None:
        return None
    held = float(
        session.scalar(
            select(func.coalesce(func.sum(LLMBatch.estimated_cost_usd), 0.0)).where(
                LLMBatch.run_id == run_id, LLMBatch.status != INGESTED
            )
        )
        or 0.0
    )
    return budget - (spent or 0.0) - held, held


def update_row(session: Session, batch_id: int, *, stamp: Sequence[str] = (), **values: Any) -> None:
    """Store what a poll found, with `updated_at` and the columns named in `stamp` (`ended_at`,
    `submitted_at`, ...) at the database's clock's now (hosts' clocks may disagree). The count of
    failed polls starts again only where the caller says the batch moved on (`failures=0`): a
    retrieve that finds the same ended batch, whose ingestion then fails again, must count
    towards the give-up."""
    moment = clock.now(session)
    stamped = dict.fromkeys(stamp, moment)
    session.execute(
        update(LLMBatch).where(LLMBatch.id == batch_id).values(updated_at=moment, **stamped, **values)
    )


def lines_done(session: Session, batch_id: int, column: str, position: int) -> None:
    """The first `position` lines of the batch's file (`column`: `output_lines_done` or
    `error_lines_done`) are stored: a new reader starts after them. The batch moved on."""
    done: dict[str, Any] = {column: position}
    update_row(session, batch_id, failures=0, **done)


def release(session: Session, batch_id: int) -> int:
    """The batch's files are read: its chunks without an answer may go in another batch (or
    to the synchronous path), each try counted (a batch refused on the enqueued-token limit
    too: a limit below one file must not send it again for ever). Returns how many chunks it
    held."""
    result = session.execute(
        update(Chunk)
        .where(Chunk.batch_id == batch_id)
        .values(batch_id=None)
        .execution_options(synchronize_session=False)
    )
    update_row(session, batch_id, status=INGESTED, stamp=("ingested_at",))
    return int(getattr(result, "rowcount", 0) or 0)


def store_answer(
    session: Session,
    chunk_id: int,
    version: str,
    result: dict[str, Any],
    model: str,
    run_id: str,
    calls: Sequence[dict[str, Any]],
) -> bool:
    """Store one line's answer, unless the chunk holds an answer to this prompt by now (the
    synchronous path answered it meanwhile): False then. Its calls (rows of the run's, from
    `llm_calls.call_values`) are recorded either way: they were paid for. (A line ingested
    before is skipped before this: `answered`.)"""
    stored = session.execute(
        update(Chunk)
        .where(Chunk.id == chunk_id, unanswered(version))
        .values(
            result=json_safe(result), model=model, prompt_version=version, completed_at=clock.now(session)
        )
        .execution_options(synchronize_session=False)
    )
    llm_calls.insert_calls(session, run_id, calls)
    return bool(getattr(stored, "rowcount", 0))


def chunk_owner(session: Session, chunk_id: int) -> tuple[Chunk, Document] | None:
    row = session.execute(
        select(Chunk, Document).join(Document, Document.id == Chunk.document_id).where(Chunk.id == chunk_id)
    ).one_or_none()
    return None if row is None else (row[0], row[1])


def note_failure(session: Session, batch_id: int, reason: str) -> int:
    """Count a failed poll of the batch (reset by `update_row` of a good one); the count."""
    session.execute(
        update(LLMBatch)
        .where(LLMBatch.id == batch_id)
        .values(failures=LLMBatch.failures + 1, error=reason, updated_at=clock.now(session))
    )
    return int(session.scalar(select(LLMBatch.failures).where(LLMBatch.id == batch_id)) or 0)


def out_of_tries(session: Session, chunk_id: int, tries: int) -> None:
    """The chunk goes synchronously (its request fits no batch)."""
    session.execute(update(Chunk).where(Chunk.id == chunk_id).values(batch_tries=tries))


def mark_dispatched(session: Session, run_id: str) -> bool:
    """True once, for the caller that hands the run to the synchronous path (the chord)."""
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.dispatched_at.is_(None))
        .values(dispatched_at=clock.now(session))
    )
    return bool(getattr(result, "rowcount", 0))


def begin_cutover(session: Session, run_id: str, now: datetime) -> datetime:
    """When the run's cutover to the synchronous path began: stamped `now` the first time."""
    fresh = session.get(Run, run_id)
    started = aware(fresh.cutover_at) if fresh and fresh.cutover_at else now
    if fresh is not None and fresh.cutover_at is None:
        fresh.cutover_at = now
    return started


def touch_poll(session: Session, run_id: str) -> None:
    """The run's batches are being polled now (the heartbeat restarts a poll that went quiet),
    on the database's clock, which `overdue_runs` reads."""
    session.execute(update(Run).where(Run.id == run_id).values(batch_polled_at=clock.now(session)))


def overdue_runs(session: Session, quiet_s: float) -> list[str]:
    """Batch runs not yet handed to the synchronous path whose batches nobody polled for
    `quiet_s` (the poll's chain of tasks was lost with a worker): the heartbeat restarts it.
    A cancelled run counts while a batch of it is open: its poll ingests what the batch
    answered before its cancel ended (paid for), then stops.
    The quiet period is measured on the database's clock, the one `touch_poll` wrote: a host
    whose clock runs ahead must not restart a poll that is only a moment old."""
    now = clock.now(session)
    return list(
        session.scalars(
            select(Run.id).where(
                Run.mode == "batch",
                Run.dispatched_at.is_(None),
                or_(
                    Run.status == "running",
                    and_(
                        Run.status == "cancelled",
                        exists().where(LLMBatch.run_id == Run.id, LLMBatch.status != INGESTED),
                    ),
                ),
                # Never polled: quiet since it was stored (not since ever: a run another
                # deployment has just stored is not stale for an hour before its first tick).
                func.coalesce(Run.batch_polled_at, Run.stored_at) < now - timedelta(seconds=quiet_s),
                Run.stored_at.is_not(None),
            )
        )
    )


def at_provider(session: Session, run_id: str) -> tuple[str | None, str | None] | None:
    """(provider batch id, input file id) of the run's newest batch that reached a provider (its
    batch id when it has one, else its uploaded file's); None when none did yet. The endpoint
    that holds it is the run's: runs record no endpoint, the provider's ids stand for it."""
    row = session.execute(
        select(LLMBatch.provider_batch_id, LLMBatch.input_file_id)
        .where(
            LLMBatch.run_id == run_id,
            or_(LLMBatch.provider_batch_id.is_not(None), LLMBatch.input_file_id.is_not(None)),
        )
        .order_by(LLMBatch.provider_batch_id.is_(None), LLMBatch.id.desc())
        .limit(1)
    ).first()
    return None if row is None else (row[0], row[1])


def batch_totals(session: Session, run_id: str) -> tuple[int, float, float]:
    """(calls at batch prices: batch lines and flex answers, their cost, what the same tokens
    cost at synchronous prices)."""
    row = session.execute(
        select(
            func.count(LLMCall.id),
            func.coalesce(func.sum(LLMCall.cost_usd), 0.0),
            func.coalesce(func.sum(LLMCall.sync_cost_usd), 0.0),
        ).where(and_(LLMCall.run_id == run_id, LLMCall.mode.in_(("batch", "flex"))))
    ).one()
    return int(row[0]), float(row[1]), float(row[2])
