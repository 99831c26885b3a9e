"""Extract: a document's attempts, its chunks' answers, its extraction and risk factors.

Delivery is at-least-once, so writes are upserts keyed on the document (and chunk), and
status changes never move a document out of a final state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from pipeline.core.constants import PROMPT_VERSION
from pipeline.storage.models import (
    TERMINAL_DOC_STATUSES,
    Chunk,
    Content,
    DocStatus,
    Document,
    Extraction,
    RiskFactor,
    utcnow,
)
from pipeline.storage.upsert import upsert

if TYPE_CHECKING:
    from pipeline.extraction.grounding import GroundedExtraction


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
    """Upsert the document's extraction and replace its risk factors (`mark_extracted` then
    ends the document).

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
    """Upsert the JSON answer of a user's schema (no fact columns); see `save_extraction`."""
    _upsert_extraction(
        session,
        doc,
        data=data,
        model=model,
        prompt_version=prompt_version,
        quotes_total=quotes_total,
        quotes_grounded=quotes_grounded,
    )


def mark_extracted(session: Session, document_id: int) -> None:
    _finish_document(session, document_id, DocStatus.EXTRACTED, None)


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
