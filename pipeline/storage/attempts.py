"""The history of a document's rounds: how each ended before `pipeline retry` sent it again.

The document's row holds its current round (status, error, attempts); each retry first copies
the round it ends into `document_attempts`, so that what failed, why and how often stays
queryable after the document is extracted at last.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from pipeline.storage import clock
from pipeline.storage.db import MAX_IDS_PER_STATEMENT
from pipeline.storage.models import Document, DocumentAttempt, table_of
from pipeline.storage.run_documents import RETRIED_FROM


def keep_rounds(session: Session, run_id: str, document_ids: Sequence[int]) -> int:
    """Copy the round each of the run's failed or cancelled `document_ids` ends now into the
    history (numbered after the rounds kept before); how many were kept."""
    ids = sorted(set(document_ids))
    now = clock.now(session)
    kept = 0
    for start in range(0, len(ids), MAX_IDS_PER_STATEMENT):
        part = ids[start : start + MAX_IDS_PER_STATEMENT]
        earlier = dict(
            session.execute(
                select(DocumentAttempt.document_id, func.max(DocumentAttempt.round))
                .where(DocumentAttempt.document_id.in_(part))
                .group_by(DocumentAttempt.document_id)
            )
            .tuples()
            .all()
        )
        rows = session.execute(
            select(
                Document.id,
                Document.status,
                Document.error,
                Document.attempts,
                Document.started_at,
                Document.finished_at,
            ).where(Document.run_id == run_id, Document.id.in_(part), Document.status.in_(RETRIED_FROM))
        ).all()
        values = [
            {
                "document_id": row.id,
                "run_id": run_id,
                "round": int(earlier.get(row.id) or 0) + 1,
                "status": row.status,
                "error": row.error,
                "attempts": row.attempts,
                "started_at": row.started_at,
                "finished_at": row.finished_at,
                "retried_at": now,
            }
            for row in rows
        ]
        if values:
            session.execute(insert(table_of(DocumentAttempt)), values)
        kept += len(values)
    return kept


def rounds_of(session: Session, document_id: int) -> list[DocumentAttempt]:
    """The document's earlier rounds, first first."""
    return list(
        session.scalars(
            select(DocumentAttempt)
            .where(DocumentAttempt.document_id == document_id)
            .order_by(DocumentAttempt.round)
        )
    )
