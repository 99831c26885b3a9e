"""A run's documents moved together by the operator: `pipeline cancel` ends the unfinished ones,
`pipeline retry` sends the failed or cancelled ones round again. Both raise the fence, so a
holder still at work writes nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from pipeline.storage import clock
from pipeline.storage.db import MAX_IDS_PER_STATEMENT
from pipeline.storage.models import DocStatus, Document, Run, RunStatus


def cancel_documents(
    session: Session, run_id: str, reason: str, document_ids: Sequence[int] | None = None
) -> int:
    """End the run's unfinished documents (or those of `document_ids` still unfinished)
    `cancelled` with `reason`; how many. The fence is raised, so a holder still at work writes
    nothing more (`LeaseLost`), and no delivery starts a cancelled document again. Only while the
    run is cancelled: a retry that took the run back keeps its documents (a worker that saw a
    late cancel flag cancels nothing)."""
    run_cancelled = select(Run.id).where(Run.id == run_id, Run.status == RunStatus.CANCELLED).exists()
    stmt = update(Document).where(
        Document.run_id == run_id,
        Document.status.in_((DocStatus.PENDING, DocStatus.RUNNING)),
        run_cancelled,
    )
    if document_ids is not None:
        stmt = stmt.where(Document.id.in_(list(document_ids)))
    cancelled = session.execute(
        stmt.values(
            status=DocStatus.CANCELLED,
            error=reason,
            finished_at=clock.now(session),
            fence=Document.fence + 1,
            lease_owner=None,
            lease_expires_at=None,
        ).execution_options(synchronize_session=False)
    )
    return int(cancelled.rowcount or 0)  # type: ignore[attr-defined]


RETRIED_FROM = (DocStatus.FAILED, DocStatus.CANCELLED)
"""What `pipeline retry` sends again (the lifecycle's "retry" move)."""


def retry_documents(session: Session, run_id: str, document_ids: Sequence[int]) -> list[int]:
    """Send the run's failed or cancelled `document_ids` round again: pending, with their
    attempts counted from 0, no error, no lease (the fence raised, so a late holder of the
    round before writes nothing). Their chunks' answers stay, so the new round asks only for
    the rest. Returns the ids moved (keep their round first: `attempts.keep_rounds`)."""
    ids = sorted(set(document_ids))
    moved: list[int] = []
    for start in range(0, len(ids), MAX_IDS_PER_STATEMENT):
        rows = session.execute(
            update(Document)
            .where(
                Document.run_id == run_id,
                Document.id.in_(ids[start : start + MAX_IDS_PER_STATEMENT]),
                Document.status.in_(RETRIED_FROM),
            )
            .values(
                status=DocStatus.PENDING,
                error=None,
                attempts=0,
                fence=Document.fence + 1,
                lease_owner=None,
                lease_expires_at=None,
                started_at=None,
                finished_at=None,
            )
            .returning(Document.id)
            .execution_options(synchronize_session=False)
        )
        moved += [int(i) for i in rows.scalars()]
    return sorted(moved)
