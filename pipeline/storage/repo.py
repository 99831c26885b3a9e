"""Repository functions: every write the pipeline makes, each safe to repeat.

Delivery is at-least-once, so writes are upserts keyed on the document (and chunk), and
status changes never move a document out of a final state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel
from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.core.constants import PROMPT_VERSION
from pipeline.core.errors import BudgetSpent
from pipeline.extraction.grounding import GroundedExtraction
from pipeline.ingest.chunking import ChunkSpan
from pipeline.llm.client import CallRecord
from pipeline.storage.models import (
    TERMINAL_DOC_STATUSES,
    Base,
    Chunk,
    Content,
    DocStatus,
    Document,
    Extraction,
    LLMCall,
    Report,
    RiskFactor,
    Run,
    RunStatus,
    utcnow,
)


def upsert(
    session: Session,
    model: type[Base],
    rows: Sequence[dict[str, Any]],
    key: Sequence[str],
    update_columns: Sequence[str] = (),
) -> None:
    """INSERT … ON CONFLICT (key) DO UPDATE/NOTHING, on Postgres and SQLite alike."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(model).values(list(rows))
    if update_columns:
        stmt = stmt.on_conflict_do_update(
            index_elements=list(key),
            set_={column: stmt.excluded[column] for column in update_columns},
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
    session.execute(stmt)


# -- producer ----------------------------------------------------------------------------


def create_run(
    session: Session,
    run_id: str,
    *,
    name: str | None,
    query: str,
    model: str,
    prompt_version: str,
    simulated: bool,
    reuse_answers: bool = True,
    budget_usd: float | None = None,
    schema: str | None = None,
) -> Run:
    run = Run(
        id=run_id,
        name=name,
        query=query,
        model=model,
        prompt_version=prompt_version,
        simulated=simulated,
        reuse_answers=reuse_answers,
        budget_usd=budget_usd,
        schema=schema,
        status=RunStatus.PENDING,
    )
    session.add(run)
    session.flush()
    return run


def delete_run(session: Session, run_id: str) -> None:
    session.execute(delete(Document).where(Document.run_id == run_id))
    session.execute(delete(Run).where(Run.id == run_id))


def content_extracted(session: Session, sha256: str) -> bool:
    """Whether some run already extracted this exact content."""
    found = session.scalar(
        select(Document.id).where(Document.sha256 == sha256, Document.status == DocStatus.EXTRACTED).limit(1)
    )
    return found is not None


def store_content(session: Session, sha256: str, text: str, size_bytes: int) -> None:
    upsert(session, Content, [{"sha256": sha256, "text": text, "bytes": size_bytes}], ["sha256"])


def add_document(
    session: Session,
    run_id: str,
    path: str,
    *,
    sha256: str | None,
    size_bytes: int,
    status: DocStatus = DocStatus.PENDING,
    error: str | None = None,
    spans: Sequence[ChunkSpan] = (),
    injection_excerpt: str | None = None,
) -> Document:
    finished = utcnow() if status in TERMINAL_DOC_STATUSES else None
    doc = Document(
        run_id=run_id,
        path=path,
        sha256=sha256,
        bytes=size_bytes,
        status=status,
        error=error,
        chunk_count=len(spans),
        finished_at=finished,
        injection_flag=injection_excerpt is not None,
        injection_excerpt=injection_excerpt,
    )
    session.add(doc)
    session.flush()
    session.add_all(
        Chunk(
            document_id=doc.id,
            idx=s.idx,
            char_start=s.char_start,
            char_end=s.char_end,
            token_estimate=s.token_estimate,
            section=s.section,
        )
        for s in spans
    )
    return doc


def set_run_status(session: Session, run_id: str, status: RunStatus, error: str | None = None) -> None:
    values: dict[str, Any] = {"status": status}
    if status == RunStatus.RUNNING:
        values["started_at"] = utcnow()
    if status in (RunStatus.COMPLETED, RunStatus.FAILED):
        values["finished_at"] = utcnow()
    if error is not None:
        values["error"] = error
    session.execute(update(Run).where(Run.id == run_id).values(**values))


# -- extraction --------------------------------------------------------------------------


def document_text(session: Session, doc: Document) -> str:
    text = session.scalar(select(Content.text).where(Content.sha256 == doc.sha256))
    if text is None:
        raise LookupError(f"document {doc.id} has no stored text")
    return text


def start_document(session: Session, document_id: int, max_attempts: int) -> Document | None:
    """Mark the document running and count the attempt; None when it is already final, or
    when it has used up its attempts (it is failed then, with the last error it met).

    Attempts that end in a retry the task layer handles are handed back (`hand_back_attempt`),
    so the stored count is of deliveries that never came back: a worker died or was lost.
    It holds across redeliveries and resumes, so a document that kills its worker cannot loop
    forever; transient errors are bounded by PIPELINE_TASK_MAX_RETRIES instead.
    """
    doc = session.get(Document, document_id, with_for_update=True)
    if doc is None or doc.status in TERMINAL_DOC_STATUSES:
        return None
    if doc.attempts >= max_attempts:
        last = doc.error or "the task never finished (its worker was lost, or it was requeued)"
        _finish_document(
            session, doc.id, DocStatus.FAILED, f"gave up after {doc.attempts} attempts; last: {last}"
        )
        return None
    doc.status = DocStatus.RUNNING
    doc.attempts += 1
    doc.started_at = doc.started_at or utcnow()
    return doc


def hand_back_attempt(session: Session, document_id: int) -> None:
    """The attempt ended in a retry the task layer handles (a transient error, the limiter,
    the time budget): it does not count against the document's attempts."""
    session.execute(
        update(Document)
        .where(Document.id == document_id, Document.attempts > 0)
        .values(attempts=Document.attempts - 1)
    )


def note_attempt_error(session: Session, document_id: int, reason: str) -> None:
    """Keep the error of a failed attempt that will be retried: the reason if it gives up."""
    session.execute(
        update(Document)
        .where(Document.id == document_id, Document.status.not_in(TERMINAL_DOC_STATUSES))
        .values(error=reason)
    )


def reuse_answers(session: Session, doc: Document, chunks: Sequence[Chunk], models: Sequence[str]) -> int:
    """Fill unanswered chunks with answers stored for the same text by an earlier run.

    Same content (sha256), same character span, same prompt version, a model still in use:
    the answer would be the same question to the same model. Returns how many were reused.
    """
    wanted = {(c.char_start, c.char_end): c for c in chunks if c.completed_at is None}
    if not wanted or doc.sha256 is None:
        return 0
    earlier = session.execute(
        select(Chunk)
        .join(Document, Document.id == Chunk.document_id)
        .where(
            Document.sha256 == doc.sha256,
            Document.id != doc.id,
            Chunk.completed_at.is_not(None),
            Chunk.prompt_version == PROMPT_VERSION,
            Chunk.model.in_(list(models)),
        )
        .order_by(Chunk.id)
    ).scalars()
    reused = 0
    for source in earlier:
        chunk = wanted.pop((source.char_start, source.char_end), None)
        if chunk is None:
            continue
        chunk.result = source.result
        chunk.model = source.model
        chunk.prompt_version = source.prompt_version
        chunk.completed_at = utcnow()
        chunk.reused_from = source.reused_from or source.id
        reused += 1
    return reused


def chunks_of(session: Session, document_id: int) -> list[Chunk]:
    return list(session.scalars(select(Chunk).where(Chunk.document_id == document_id).order_by(Chunk.idx)))


def save_chunk_result(
    session: Session, chunk_id: int, result: BaseModel, *, model: str, prompt_version: str
) -> None:
    session.execute(
        update(Chunk)
        .where(Chunk.id == chunk_id)
        .values(
            result=result.model_dump(mode="json"),
            model=model,
            prompt_version=prompt_version,
            completed_at=utcnow(),
        )
    )


def save_extraction(
    session: Session,
    doc: Document,
    checked: GroundedExtraction,
    *,
    model: str,
    prompt_version: str,
) -> None:
    """Upsert the document's extraction and replace its risk factors, then mark it extracted.

    Every fact is stored, grounded or not: the flags and offsets say which quotes were
    found in the filing's text.
    """
    extraction = checked.extraction
    revenue = checked.revenue
    _upsert_extraction(
        session,
        doc,
        data=extraction.model_dump(mode="json"),
        model=model,
        prompt_version=prompt_version,
        quotes_total=checked.quotes_total,
        quotes_grounded=checked.quotes_grounded,
        company=extraction.company,
        fiscal_year=extraction.fiscal_year,
        revenue_usd=extraction.revenue_usd,
        revenue_quote=extraction.revenue_quote,
        revenue_grounded=revenue.grounded if revenue else None,
        revenue_quote_start=revenue.start if revenue else None,
        revenue_quote_end=revenue.end if revenue else None,
    )
    session.execute(delete(RiskFactor).where(RiskFactor.document_id == doc.id))
    session.add_all(
        RiskFactor(
            document_id=doc.id,
            run_id=doc.run_id,
            position=i,
            title=r.title,
            quote=r.quote,
            grounded=check.grounded,
            quote_start=check.start,
            quote_end=check.end,
        )
        for i, (r, check) in enumerate(zip(extraction.risk_factors, checked.risks, strict=True))
    )
    _finish_document(session, doc.id, DocStatus.EXTRACTED, None)


def save_custom_extraction(
    session: Session,
    doc: Document,
    data: dict[str, Any],
    *,
    quotes_total: int,
    quotes_grounded: int,
    model: str,
    prompt_version: str,
) -> None:
    """Upsert the JSON answer of a user's schema (no fact columns), then mark it extracted."""
    _upsert_extraction(
        session,
        doc,
        data=data,
        model=model,
        prompt_version=prompt_version,
        quotes_total=quotes_total,
        quotes_grounded=quotes_grounded,
    )
    _finish_document(session, doc.id, DocStatus.EXTRACTED, None)


def _upsert_extraction(session: Session, doc: Document, **columns: Any) -> None:
    """Insert or replace the document's `extractions` row with `columns`."""
    row = {"document_id": doc.id, "run_id": doc.run_id, **columns, "created_at": utcnow()}
    upsert(session, Extraction, [row], ["document_id"], [k for k in row if k != "document_id"])


def fail_document(session: Session, document_id: int, reason: str) -> None:
    _finish_document(session, document_id, DocStatus.FAILED, reason)


def _finish_document(session: Session, document_id: int, status: DocStatus, error: str | None) -> None:
    session.execute(
        update(Document)
        .where(Document.id == document_id, Document.status.not_in(TERMINAL_DOC_STATUSES))
        .values(status=status, error=error, finished_at=utcnow())
    )


def record_calls(
    session: Session,
    run_id: str,
    document_id: int | None,
    chunk_idx: int | None,
    records: Iterable[CallRecord],
) -> None:
    session.add_all(
        LLMCall(
            run_id=run_id,
            document_id=document_id,
            chunk_idx=chunk_idx,
            stage=r.stage,
            model=r.model,
            status=r.status,
            prompt_tokens=r.prompt_tokens,
            completion_tokens=r.completion_tokens,
            latency_ms=r.latency_ms,
            error=r.error,
            key_slot=r.key_slot,
            limiter_wait_ms=r.limiter_wait_ms,
            cost_usd=r.cost_usd,
        )
        for r in records
    )
    spent = sum(r.cost_usd or 0.0 for r in records)
    if spent:
        session.execute(update(Run).where(Run.id == run_id).values(cost_usd=Run.cost_usd + spent))


def check_budget(session: Session, run_id: str) -> None:
    """Raise BudgetSpent once the run's recorded cost reached its budget."""
    row = session.execute(select(Run.budget_usd, Run.cost_usd).where(Run.id == run_id)).one_or_none()
    if row is not None and row.budget_usd is not None and row.cost_usd >= row.budget_usd:
        raise BudgetSpent(f"budget: the run spent ${row.cost_usd:.4f} of its ${row.budget_usd:.4f}")


# -- finalize ----------------------------------------------------------------------------


def status_counts(session: Session, run_id: str) -> dict[str, int]:
    rows = session.execute(
        select(Document.status, func.count()).where(Document.run_id == run_id).group_by(Document.status)
    )
    return {str(status): int(count) for status, count in rows.tuples()}


def unfinished_count(session: Session, run_id: str) -> int:
    return (
        session.scalar(
            select(func.count()).where(
                Document.run_id == run_id, Document.status.not_in(TERMINAL_DOC_STATUSES)
            )
        )
        or 0
    )


def extracted_ids(session: Session, run_id: str, *, without_summary: bool = False) -> list[int]:
    stmt = select(Extraction.document_id).where(Extraction.run_id == run_id)
    if without_summary:
        stmt = stmt.where(Extraction.summary.is_(None))
    return list(session.scalars(stmt.order_by(Extraction.document_id)))


def save_summary(session: Session, document_id: int, summary: str) -> None:
    session.execute(update(Extraction).where(Extraction.document_id == document_id).values(summary=summary))


def save_report(
    session: Session,
    run_id: str,
    markdown: str,
    data: dict[str, Any],
    status: RunStatus,
    error: str | None = None,
) -> None:
    row = {"run_id": run_id, "markdown": markdown, "json": data, "created_at": utcnow()}
    upsert(session, Report, [row], ["run_id"], ["markdown", "json", "created_at"])
    set_run_status(session, run_id, status, error)


def run_status(session: Session, run_id: str) -> str | None:
    return session.scalar(select(Run.status).where(Run.id == run_id))


def report_exists(session: Session, run_id: str) -> bool:
    return session.scalar(select(func.count()).where(Report.run_id == run_id)) == 1
