"""`pipeline prune`'s statements: old runs found, marked pruned, and their filing texts, chunks
and call rows deleted a batch of documents at a time (`pipeline.runs.retention` drives them).

A filing's text is shared by every run that submitted the same content (`contents`, keyed by
sha256). A text is dropped only when no run that keeps its texts uses it: every run whose
`pruned_at` is NULL, whatever its age or state. The row stays with its hash and size (the
nightly's "already extracted" check and `documents.sha256` read the hash), and a new submit of
the same filing writes the text again (`intake.store_content`).

Rows are locked before they are checked: a text whose row another transaction holds (a submit
storing that content, or another prune) is skipped, so a concurrent submit never loses the
text of the document it is adding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    LargeBinary,
    cast,
    delete,
    exists,
    func,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from pipeline.core.settings import get_settings
from pipeline.storage import clock
from pipeline.storage.db import MAX_IDS_PER_STATEMENT
from pipeline.storage.llm_calls import CallTotals, call_totals
from pipeline.storage.models import (
    Chunk,
    Content,
    Document,
    DocumentAttempt,
    Extraction,
    LLMBatch,
    LLMCall,
    Report,
    RiskFactor,
    Run,
    RunStatus,
    SynthesisPartial,
    aware,
)

FINAL_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
"""A run in one of these may be pruned; pending, running and stalled ones never are."""

CALLS_PER_STATEMENT = 5_000
"""The run's own calls (compress, synthesis: no document) are deleted this many at a time."""


@dataclass
class Tally:
    """Rows (and their stored bytes) that a prune deleted, or would delete."""

    texts: int = 0
    text_bytes: int = 0
    texts_kept: int = 0
    """Texts left because a run that keeps its texts has the same filing (or is storing it)."""
    chunks: int = 0
    chunk_bytes: int = 0
    calls: int = 0
    call_bytes: int = 0
    documents: int = 0
    """`--all` only, as are extractions, risk factors and reports."""
    extractions: int = 0
    risk_factors: int = 0
    reports: int = 0
    whole_bytes: int = 0
    """`--all`: the stored bytes of those documents, extractions, risk factors and reports."""

    @property
    def bytes(self) -> int:
        return self.text_bytes + self.chunk_bytes + self.call_bytes + self.whole_bytes

    def add(self, other: Tally) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any] | None) -> Tally:
        known = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in (data or {}).items() if k in known})


@dataclass(frozen=True)
class OldRun:
    run_id: str
    name: str | None
    status: str
    ended: datetime
    """When it ended (its finished_at, else its created_at)."""
    pruned: dict[str, Any] | None

    @property
    def final(self) -> bool:
        return self.status in FINAL_RUN_STATUSES

    @property
    def complete(self) -> bool:
        """An earlier prune of it finished: nothing is left to drop but with `--all`."""
        return bool(self.pruned and self.pruned.get("complete"))


def _ended() -> ColumnElement[Any]:
    return func.coalesce(Run.finished_at, Run.created_at)


def old_runs(session: Session, cutoff: datetime) -> list[OldRun]:
    """Every run that ended (or, unfinished, was created) before `cutoff`, oldest first."""
    rows = session.execute(
        select(Run.id, Run.name, Run.status, _ended(), Run.pruned)
        .where(_ended() < cutoff)
        .order_by(_ended(), Run.id)
    ).tuples()
    return [OldRun(i, name, status, aware(ended), pruned) for i, name, status, ended, pruned in rows]


def begin(session: Session, run_id: str, cutoff: datetime) -> str | None:
    """Lock the run and mark it pruned: `pruned_at` (once), and what status shows of it then
    (its call totals and chunks, kept in `pruned.before`). None when it may be pruned; else
    why not: its status when it is no longer final (a retry started), "ended since" when it
    ended after `cutoff` (retried and ended again), "gone" when it was deleted."""
    run = session.get(Run, run_id, with_for_update=True)  # a retry waits, then sees pruned_at
    if run is None:
        return "gone"
    if run.status not in FINAL_RUN_STATUSES:
        return str(run.status)
    if aware(run.finished_at or run.created_at) >= cutoff:
        return "ended since"
    if run.pruned_at is None:
        run.pruned_at = clock.now(session)
    if not (run.pruned or {}).get("before"):
        run.pruned = {"before": _before(session, run_id)}
    return None


def _before(session: Session, run_id: str) -> dict[str, Any]:
    totals = asdict(call_totals(session, run_id))
    chunks, done = session.execute(
        select(func.count(Chunk.id), func.count(Chunk.completed_at))
        .join(Document, Document.id == Chunk.document_id)
        .where(Document.run_id == run_id)
    ).one()
    return {**totals, "chunks": int(chunks), "chunks_done": int(done)}


def kept_totals(pruned: dict[str, Any] | None) -> tuple[CallTotals, int, int] | None:
    """A pruned run's calls, chunks and chunks answered as they were before the prune (its
    rows are gone); None for a run not pruned."""
    before = (pruned or {}).get("before")
    if not before:
        return None
    known = {f.name for f in fields(CallTotals)}
    totals = CallTotals(**{k: v for k, v in before.items() if k in known})
    return totals, int(before.get("chunks", 0)), int(before.get("chunks_done", 0))


def finish(session: Session, run_id: str, deleted: Tally) -> None:
    """The prune of the run is complete: what it deleted is kept beside what the run had."""
    pruned = dict(session.scalar(select(Run.pruned).where(Run.id == run_id)) or {})
    total = Tally.of(pruned.get("deleted"))  # an earlier prune that stopped half-way
    total.add(deleted)
    pruned["deleted"] = total.as_dict()
    pruned["complete"] = True
    session.execute(update(Run).where(Run.id == run_id).values(pruned=pruned))


def documents_after(session: Session, run_id: str, after_id: int, limit: int) -> list[tuple[int, str | None]]:
    """(id, sha256) of the run's next `limit` documents after `after_id`, by id."""
    rows = session.execute(
        select(Document.id, Document.sha256)
        .where(Document.run_id == run_id, Document.id > after_id)
        .order_by(Document.id)
        .limit(min(limit, MAX_IDS_PER_STATEMENT))
    ).tuples()
    return [(int(i), sha) for i, sha in rows]


def _in_use() -> ColumnElement[bool]:
    """The content is a filing of some run that keeps its texts (not pruned)."""
    return exists(
        select(Document.id)
        .join(Run, Run.id == Document.run_id)
        .where(Document.sha256 == Content.sha256, Run.pruned_at.is_(None))
    )


def drop_texts(session: Session, hashes: Sequence[str]) -> Tally:
    """Set to NULL the texts of these contents that no run keeping its texts uses."""
    if not hashes:
        return Tally()
    locked = list(
        session.scalars(
            select(Content.sha256)
            .where(Content.sha256.in_(list(hashes)), Content.text.is_not(None))
            .with_for_update(skip_locked=True)
        )
    )
    # A statement of its own, after the locks: it sees every document committed before them.
    dropped = session.execute(
        select(Content.sha256, _bytes(session, Content.text)).where(Content.sha256.in_(locked), ~_in_use())
    ).all()
    if dropped:
        session.execute(
            update(Content)
            .where(Content.sha256.in_([sha for sha, _ in dropped]))
            .values(text=None)
            .execution_options(synchronize_session=False)
        )
    kept = session.scalar(
        select(func.count()).where(Content.sha256.in_(list(hashes)), Content.text.is_not(None))
    )
    return Tally(
        texts=len(dropped), text_bytes=sum(int(b or 0) for _, b in dropped), texts_kept=int(kept or 0)
    )


def delete_chunks_and_calls(session: Session, document_ids: Sequence[int]) -> Tally:
    """The documents' chunks and their LLM calls' rows."""
    ids = list(document_ids)
    tally = Tally()
    tally.chunks, tally.chunk_bytes = _delete(session, Chunk, Chunk.document_id.in_(ids))
    tally.calls, tally.call_bytes = _delete(session, LLMCall, LLMCall.document_id.in_(ids))
    return tally


def delete_run_calls(session: Session, run_id: str) -> Tally:
    """Up to CALLS_PER_STATEMENT of the run's calls left once its documents' are gone (compress
    and synthesis calls, of no document); call again until it deletes none."""
    batch = select(LLMCall.id).where(LLMCall.run_id == run_id).limit(CALLS_PER_STATEMENT)
    ids = list(session.scalars(batch))
    tally = Tally()
    tally.calls, tally.call_bytes = _delete(session, LLMCall, LLMCall.id.in_(ids)) if ids else (0, 0)
    return tally


def delete_documents(session: Session, document_ids: Sequence[int], hashes: Sequence[str]) -> Tally:
    """`--all`: the documents with their extractions, risk factors and earlier rounds, then the
    rows of those contents no document refers to any more."""
    ids = list(document_ids)
    tally = Tally()
    tally.extractions, extraction_bytes = _delete(session, Extraction, Extraction.document_id.in_(ids))
    tally.risk_factors, risk_bytes = _delete(session, RiskFactor, RiskFactor.document_id.in_(ids))
    _delete(session, DocumentAttempt, DocumentAttempt.document_id.in_(ids), measure=False)
    tally.documents, document_bytes = _delete(session, Document, Document.id.in_(ids))
    tally.whole_bytes = extraction_bytes + risk_bytes + document_bytes
    if hashes:
        locked = list(
            session.scalars(
                select(Content.sha256)
                .where(Content.sha256.in_(list(hashes)))
                .with_for_update(skip_locked=True)
            )
        )
        referred = exists(select(Document.id).where(Document.sha256 == Content.sha256))
        session.execute(
            delete(Content)
            .where(Content.sha256.in_(locked), ~referred)
            .execution_options(synchronize_session=False)
        )
    return tally


def delete_run(session: Session, run_id: str) -> Tally:
    """`--all`, once its documents are gone: the run's report, partial syntheses, batches and
    row."""
    tally = Tally()
    tally.reports, tally.whole_bytes = _delete(session, Report, Report.run_id == run_id)
    for model, column in (
        (SynthesisPartial, SynthesisPartial.run_id),
        (LLMBatch, LLMBatch.run_id),
        (DocumentAttempt, DocumentAttempt.run_id),
    ):
        _delete(session, model, column == run_id, measure=False)
    _delete(session, Run, Run.id == run_id, measure=False)
    return tally


def _delete(
    session: Session, model: Any, where: ColumnElement[bool], *, measure: bool = True
) -> tuple[int, int]:
    """Delete the rows; (how many, their stored bytes: 0 unless `measure`)."""
    size = 0
    if measure:
        size = int(
            session.scalar(
                select(func.coalesce(func.sum(_row_bytes(session, model)), 0)).select_from(model).where(where)
            )
            or 0
        )
    result = session.execute(delete(model).where(where).execution_options(synchronize_session=False))
    return int(result.rowcount or 0), size  # type: ignore[attr-defined]


def _bytes(session: Session, column: Any) -> ColumnElement[Any]:
    """A value's stored size: Postgres's (after TOAST compression); SQLite's length in bytes."""
    if session.get_bind().dialect.name == "postgresql":
        return func.pg_column_size(column)
    return func.length(cast(column, LargeBinary))


_WIDE: dict[Any, Any] = {
    Chunk: Chunk.result,
    LLMCall: LLMCall.error,
    Document: Document.path,
    Extraction: Extraction.data,
    RiskFactor: RiskFactor.quote,
    Report: Report.markdown,
}
"""SQLite: the column whose length stands for a row's size."""


def _row_bytes(session: Session, model: Any) -> ColumnElement[Any]:
    """A row's stored size on Postgres (the whole row, its TOASTed values as stored); on SQLite,
    which has no such measure, the length of its one wide column (a chunk's answer, a call's
    error)."""
    if session.get_bind().dialect.name == "postgresql":
        return func.pg_column_size(literal_column(model.__tablename__))
    wide = _WIDE.get(model, LLMCall.error)
    return func.coalesce(func.length(cast(wide, LargeBinary)), 0)


def keeps_texts(cutoff: datetime) -> ColumnElement[bool]:
    """A run this prune leaves its texts to: not pruned, and not one it prunes (final and
    ended before `cutoff`)."""
    return Run.pruned_at.is_(None) & ~(Run.status.in_(FINAL_RUN_STATUSES) & (_ended() < cutoff))


def estimate_texts(session: Session, cutoff: datetime) -> Tally:
    """`--dry-run`: the texts a prune with `cutoff` would drop, and those of the runs it would
    prune that it would keep (a run that keeps its texts has the same filing)."""
    pruned = Run.status.in_(FINAL_RUN_STATUSES) & (_ended() < cutoff)

    def filing_of(runs: ColumnElement[bool]) -> ColumnElement[bool]:
        return exists(
            select(Document.id)
            .join(Run, Run.id == Document.run_id)
            .where(Document.sha256 == Content.sha256, runs)
        )

    with_text = Content.text.is_not(None)
    dropped, size = session.execute(
        select(func.count(), func.coalesce(func.sum(_bytes(session, Content.text)), 0)).where(
            with_text, filing_of(pruned), ~filing_of(keeps_texts(cutoff))
        )
    ).one()
    kept = session.scalar(
        select(func.count()).where(
            with_text, filing_of(pruned & Run.pruned_at.is_(None)), filing_of(keeps_texts(cutoff))
        )
    )
    return Tally(texts=int(dropped), text_bytes=int(size), texts_kept=int(kept or 0))


def estimate_run(session: Session, run_id: str, *, everything: bool) -> Tally:
    """`--dry-run`: the chunks and calls (with `everything`: documents, extractions, risk
    factors and report) of the run that a prune would delete."""
    docs = select(Document.id).where(Document.run_id == run_id)
    tally = Tally()
    tally.chunks, tally.chunk_bytes = _count(session, Chunk, Chunk.document_id.in_(docs))
    tally.calls, tally.call_bytes = _count(session, LLMCall, LLMCall.run_id == run_id)
    if everything:
        whole: list[tuple[Any, Any]] = [(Document, Document.run_id), (Extraction, Extraction.run_id)]
        whole += [(RiskFactor, RiskFactor.run_id), (Report, Report.run_id)]
        counted = [_count(session, model, column == run_id) for model, column in whole]
        tally.documents, tally.extractions, tally.risk_factors, tally.reports = (n for n, _ in counted)
        tally.whole_bytes = sum(size for _, size in counted)
    return tally


def _count(
    session: Session, model: Any, where: ColumnElement[bool], *, measure: bool = True
) -> tuple[int, int]:
    if not measure:
        return int(session.scalar(select(func.count()).select_from(model).where(where)) or 0), 0
    size = func.coalesce(func.sum(_row_bytes(session, model)), 0)
    n, b = session.execute(select(func.count(), size).select_from(model).where(where)).one()
    return int(n), int(b or 0)


def vacuum(engine: Engine, tables: Sequence[str]) -> str:
    """VACUUM (ANALYZE) of `tables` on Postgres, outside a transaction and with no statement
    timeout (a large table takes what it takes); SQLite's VACUUM of the whole file. What was
    run, in words."""
    with engine.connect() as connection:
        auto = connection.execution_options(isolation_level="AUTOCOMMIT")
        if engine.dialect.name == "postgresql":
            listed = ", ".join(tables)
            if not get_settings().db_transaction_pooler:  # a pooler's session is not ours to set
                auto.execute(text("SET statement_timeout = 0"))
            auto.execute(text(f"VACUUM (ANALYZE) {listed}"))
            return f"VACUUM (ANALYZE) {listed}"
        auto.exec_driver_sql("VACUUM")
        return "VACUUM"
