"""A run's totals for `pipeline status`: quotes grounded, chunks answered, documents flagged and
reclaimed, per-document grounding, the newest failed call's error."""

from __future__ import annotations

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session

from pipeline.storage.models import Chunk, Document, Extraction, LLMCall


def quote_totals(session: Session, run_id: str) -> tuple[int, int]:
    """(quotes, quotes grounded) over the run's extractions."""
    quotes, grounded = session.execute(
        select(
            func.coalesce(func.sum(Extraction.quotes_total), 0),
            func.coalesce(func.sum(Extraction.quotes_grounded), 0),
        ).where(Extraction.run_id == run_id)
    ).one()
    return int(quotes), int(grounded)


def chunk_totals(session: Session, run_id: str) -> tuple[int, int]:
    """(chunks, chunks answered) of the run's documents, from the run's chunk index alone."""
    chunks, done = session.execute(
        select(func.count(), func.count(Chunk.completed_at)).where(Chunk.run_id == run_id)
    ).one()
    return int(chunks), int(done)


def flagged_count(session: Session, run_id: str) -> int:
    """The run's documents flagged as holding a prompt injection."""
    flagged = session.scalar(select(func.count()).where(Document.run_id == run_id, Document.injection_flag))
    return int(flagged or 0)


def reclaims_by_owner(session: Session, run_id: str) -> dict[str, int]:
    """The run's reclaimed documents, counted by the owner they were reclaimed from."""
    rows = session.execute(
        select(func.coalesce(Document.reclaimed_from, "a reclaim"), func.count())
        .where(Document.run_id == run_id, Document.reclaims > 0)
        .group_by(Document.reclaimed_from)
    ).all()
    return {str(owner): int(n) for owner, n in rows}


def grounding_rows(
    session: Session, run_id: str, *, worth_only: bool = False, limit: int | None = None
) -> tuple[list[tuple[str, int, int, bool | None, bool]], int]:
    """Per extracted document: (path, quotes, quotes grounded, revenue grounded, injection flag),
    the lowest share of quotes grounded first (none asked counts as all), then by path; and how
    many documents there are in all. `worth_only`: only the documents worth a look (a quote or
    the revenue not found, or flagged); `limit`: the first of them, ordered and cut by the
    database, so that a page of the worst reads as much of a 20,000-document run as of a small one."""
    share = case(
        (Extraction.quotes_total > 0, Extraction.quotes_grounded * 1.0 / Extraction.quotes_total), else_=1.0
    )
    query = (
        select(
            Document.path,
            Extraction.quotes_total,
            Extraction.quotes_grounded,
            Extraction.revenue_grounded,
            Document.injection_flag,
            func.count().over(),
        )
        .join(Extraction, Extraction.document_id == Document.id)
        .where(Document.run_id == run_id, Extraction.run_id == run_id)  # both through their run's index
        .order_by(share, Document.path)
        .limit(limit)
    )
    if worth_only:
        query = query.where(
            or_(
                Document.injection_flag,
                Extraction.revenue_grounded.is_(False),
                Extraction.quotes_grounded < Extraction.quotes_total,
            )
        )
    rows = session.execute(query).all()
    found = [(path, total, grounded, revenue, bool(flag)) for path, total, grounded, revenue, flag, _ in rows]
    return found, int(rows[0][5]) if rows else 0


def last_call_error(session: Session, run_id: str) -> str | None:
    """The error of the run's newest call that did not end ok."""
    return session.scalar(
        select(LLMCall.error)
        .where(LLMCall.run_id == run_id, LLMCall.status != "ok")
        .order_by(LLMCall.id.desc())
        .limit(1)
    )
