"""Extract: a document's text and run, its chunks' answers, its extraction and risk factors.

Delivery is at-least-once, so writes are upserts keyed on the document (and chunk), each made
by the holder of the document's lease (`pipeline.storage.leases.hold`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from sqlalchemy import ColumnElement, bindparam, delete, insert, select, update
from sqlalchemy.orm import Session

from pipeline.core.constants import PROMPT_VERSION
from pipeline.core.errors import TextUnavailable
from pipeline.storage import clock
from pipeline.storage.document_leases import hold
from pipeline.storage.fit import fitted, json_safe
from pipeline.storage.models import (
    Chunk,
    Content,
    Document,
    Extraction,
    RiskFactor,
    Run,
    XbrlFact,
    aware,
    table_of,
    utcnow,
)
from pipeline.storage.upsert import upsert

if TYPE_CHECKING:
    from pipeline.extraction.confidence import Assessed


@dataclass(frozen=True)
class RunOfDocument:
    """What extracting a document needs of its run (a run that is gone: the defaults)."""

    schema: str | None = None
    query: str = ""
    reuse_answers: bool = False
    budget_usd: float | None = None
    mode: str = "sync"
    extract_tier: str | None = None
    """flex: its extract calls go at flex processing's tier (`runs.extract_tier`)."""
    standard_from: datetime | None = None
    """From when they go at the standard tier instead (`runs.standard_from`)."""
    prompt_version: str = PROMPT_VERSION
    """The run's prompt version, which names its layout (`runs.prompt_version`)."""


def xbrl_revenue(session: Session, document_id: int) -> tuple[float, str] | None:
    """The filing's own total-revenue fact (value, concept), when its inline XBRL has one."""
    row = session.execute(
        select(XbrlFact.value, XbrlFact.concept).where(
            XbrlFact.document_id == document_id, XbrlFact.field == "revenue_usd", XbrlFact.value.is_not(None)
        )
    ).one_or_none()
    return (float(row[0]), str(row[1] or "")) if row else None


def text_and_run(session: Session, doc: Document) -> tuple[str, RunOfDocument]:
    """The document's text and what its extraction needs of its run, in one query."""
    found = session.execute(
        select(
            Content.text,
            Run.schema,
            Run.query,
            Run.reuse_answers,
            Run.budget_usd,
            Run.mode,
            Run.extract_tier,
            Run.standard_from,
            Run.id,
            Run.prompt_version,
        )
        .select_from(Content)
        .outerjoin(Run, Run.id == doc.run_id)
        .where(Content.sha256 == doc.sha256)
    ).first()
    if found is None or not found.text:
        raise _unavailable(doc, found.text if found else None)
    if found.id is None:
        return found.text, RunOfDocument()
    return found.text, RunOfDocument(
        found.schema,
        found.query or "",
        bool(found.reuse_answers),
        found.budget_usd,
        found.mode,
        found.extract_tier,
        aware(found.standard_from) if found.standard_from else None,
        found.prompt_version or PROMPT_VERSION,
    )


def document_text(session: Session, doc: Document) -> str:
    text = session.scalar(select(Content.text).where(Content.sha256 == doc.sha256))
    if not text:
        raise _unavailable(doc, text)
    return text


def _unavailable(doc: Document, text: str | None) -> TextUnavailable:
    """Why the document cannot be extracted: its text is NULL (`pipeline prune` dropped it) or
    '' (a filing is never stored empty: a downgrade of migration 0013 left that in its place)."""
    what = "was pruned" if text is None else "is stored empty"
    return TextUnavailable(
        f"document {doc.id}'s text {what} (content {doc.sha256}): nothing to extract; submit the file again"
    )


def reusable(models: Sequence[str], version: str) -> tuple[ColumnElement[bool], ...]:
    """What makes a stored chunk answer reusable for the same text: answered, to this prompt
    version, by a model still in use (`reuse_answers`, and `pipeline plan`'s count of it)."""
    return (Chunk.completed_at.is_not(None), Chunk.prompt_version == version, Chunk.model.in_(list(models)))


def reuse_answers(
    session: Session, doc: Document, chunks: Sequence[Chunk], models: Sequence[str], version: str
) -> int:
    """Fill unanswered chunks with answers stored for the same text by an earlier run.

    Same content (sha256), same character span, same prompt version (`version`, the run's), a
    model still in use: the answer would be the same question to the same model. Returns how
    many were reused.
    """
    wanted = {(c.char_start, c.char_end): c for c in chunks if c.completed_at is None}
    if not wanted or doc.sha256 is None:
        return 0
    earlier = session.execute(
        select(Chunk)
        .join(Document, Document.id == Chunk.document_id)
        .where(Document.sha256 == doc.sha256, Document.id != doc.id, *reusable(models, version))
        .order_by(Chunk.id)
    ).scalars()
    reused, now = 0, clock.now(session)
    for source in earlier:
        chunk = wanted.pop((source.char_start, source.char_end), None)
        if chunk is None:
            continue
        chunk.result = source.result
        chunk.model = source.model
        chunk.prompt_version = source.prompt_version
        chunk.completed_at = now
        chunk.reused_from = source.reused_from or source.id
        reused += 1
    return reused


def chunks_of(session: Session, document_id: int) -> list[Chunk]:
    return list(session.scalars(select(Chunk).where(Chunk.document_id == document_id).order_by(Chunk.idx)))


_CHUNKS = table_of(Chunk)
_SAVE_CHUNK = (
    update(_CHUNKS)
    .where(_CHUNKS.c.id == bindparam("chunk_id"))
    .values(
        result=bindparam("answer"),
        model=bindparam("answer_model"),
        prompt_version=bindparam("answer_version"),
        completed_at=bindparam("answered_at"),
        token_p=bindparam("answer_token_p"),
    )
)


def save_chunk_result(
    session: Session,
    chunk: Chunk,
    fence: int,
    result: BaseModel,
    *,
    model: str,
    prompt_version: str,
    token_p: dict[str, float] | None = None,
) -> None:
    """Store a chunk's answer (and its fields' token probabilities, when known), if lease
    `fence` still holds its document."""
    hold(session, chunk.document_id, fence)
    session.execute(
        _SAVE_CHUNK,
        {
            "chunk_id": chunk.id,
            "answer": json_safe(result.model_dump(mode="json")),
            "answer_model": model,
            "answer_version": prompt_version,
            "answered_at": clock.now(session),
            "answer_token_p": token_p,
        },
    )


_DELETE_RISKS = delete(table_of(RiskFactor)).where(
    table_of(RiskFactor).c.document_id == bindparam("risks_of")
)


def save_extraction(
    session: Session,
    doc: Document,
    assessed: Assessed,
    *,
    model: str,
    prompt_version: str,
    summary: str | None = None,
) -> None:
    """Upsert the document's extraction (with its summary when there is one) and replace its
    risk factors (`mark_extracted` ends the document in the same transaction).

    Every fact is stored, grounded or not: the flags and offsets say which quotes were
    found in the filing's text, and each field's confidence how far to trust it.
    """
    checked = assessed.grounded
    extraction = checked.extraction
    revenue = checked.revenue
    scores = assessed.fields
    _upsert_extraction(
        session,
        doc,
        data=extraction.model_dump(mode="json")
        | ({"_filing_metadata": assessed.checks} if assessed.checks else {}),
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
        company_confidence=scores["company"].confidence,
        fiscal_year_confidence=scores["fiscal_year"].confidence,
        revenue_confidence=scores["revenue_usd"].confidence,
        revenue_match=scores["revenue_usd"].match,
        escalated=",".join(assessed.escalated) or None,
        summary=summary,
    )
    session.execute(_DELETE_RISKS, {"risks_of": doc.id})
    risks = [
        fitted(
            RiskFactor,
            {
                "document_id": doc.id,
                "run_id": doc.run_id,
                "position": i,
                "title": r.title,
                "quote": r.quote,
                "grounded": check.grounded,
                "quote_start": check.start,
                "quote_end": check.end,
                "confidence": scored.confidence,
                "match": scored.match,
            },
        )
        for i, (r, check, scored) in enumerate(
            zip(extraction.risk_factors, checked.risks, assessed.risks, strict=True)
        )
    ]
    if risks:
        session.execute(insert(table_of(RiskFactor)), risks)


def save_custom_extraction(
    session: Session,
    doc: Document,
    data: dict[str, Any],
    *,
    quotes_total: int,
    quotes_grounded: int,
    model: str,
    prompt_version: str,
    summary: str | None = None,
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
        summary=summary,
    )


def _upsert_extraction(session: Session, doc: Document, **columns: Any) -> None:
    """Insert or replace the document's `extractions` row with `columns`, fitted to them (a
    model's answer may be longer than a column, or hold a NUL: `pipeline.storage.fit`)."""
    row = fitted(Extraction, {"document_id": doc.id, "run_id": doc.run_id, **columns, "created_at": utcnow()})
    upsert(session, Extraction, [row], ["document_id"], [k for k in row if k != "document_id"])
