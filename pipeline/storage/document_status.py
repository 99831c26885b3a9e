"""A run's documents read by status: the failed ones with their errors (`pipeline status`),
those `pipeline retry` may send again, and those a resume enqueues again."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Row, func, or_, select
from sqlalchemy.orm import Session

from pipeline.storage.models import Chunk, DocStatus, Document


def errors_with_status(
    session: Session, run_id: str, statuses: Sequence[str]
) -> list[tuple[str, str, str | None]]:
    """(status, path, error) of the run's documents in one of `statuses`."""
    rows = session.execute(
        select(Document.status, Document.path, Document.error).where(
            Document.run_id == run_id, Document.status.in_(statuses)
        )
    ).all()
    return [(str(status), path, error) for status, path, error in rows]


def ids_with_status(session: Session, run_id: str, statuses: Sequence[str]) -> set[int]:
    """The ids of the run's documents in one of `statuses`."""
    return set(
        session.scalars(select(Document.id).where(Document.run_id == run_id, Document.status.in_(statuses)))
    )


def statuses_of(session: Session, run_id: str, document_ids: Sequence[int]) -> dict[int, str]:
    """The status of each of `document_ids` that is one of the run's documents."""
    return dict(
        session.execute(
            select(Document.id, Document.status).where(
                Document.run_id == run_id, Document.id.in_(list(document_ids))
            )
        )
        .tuples()
        .all()
    )


def chunk_counts(session: Session, document_ids: list[int]) -> tuple[int, int]:
    """(chunks, chunks answered) of the documents."""
    row = session.execute(
        select(func.count(Chunk.id), func.count(Chunk.completed_at)).where(
            Chunk.document_id.in_(document_ids)
        )
    ).one()
    return int(row[0]), int(row[1])


def resumable(session: Session, run_id: str, cutoff: datetime) -> Sequence[Row[tuple[int, str, int]]]:
    """(id, status, chunk_count) of the run's pending documents and of its running ones with no
    start or answered chunk since `cutoff`; longest first."""
    last_answer = (
        select(Chunk.document_id, func.max(Chunk.completed_at).label("at"))
        .group_by(Chunk.document_id)
        .subquery()
    )
    return session.execute(
        select(Document.id, Document.status, Document.chunk_count)
        .outerjoin(last_answer, last_answer.c.document_id == Document.id)
        .where(Document.run_id == run_id)
        .where(
            or_(
                Document.status == DocStatus.PENDING,
                (Document.status == DocStatus.RUNNING)
                & or_(Document.started_at.is_(None), Document.started_at < cutoff)
                & or_(last_answer.c.at.is_(None), last_answer.c.at < cutoff),
            )
        )
        .order_by(Document.chunk_count.desc(), Document.id)
    ).all()


def running_count(session: Session, run_id: str) -> int:
    """The run's documents that are running."""
    running = session.scalar(
        select(func.count()).where(Document.run_id == run_id, Document.status == DocStatus.RUNNING)
    )
    return int(running or 0)
