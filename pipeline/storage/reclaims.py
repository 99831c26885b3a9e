"""Reclaim: a live worker's heartbeat takes back the documents of a worker that died, those
whose lease ran out and those it had received but never started, for a new delivery.

Each reclaim raises the fence, so the old holder, should it wake, writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from pipeline.storage import clock
from pipeline.storage.db import MAX_IDS_PER_STATEMENT
from pipeline.storage.document_leases import released_columns
from pipeline.storage.models import DocStatus, Document, aware


def expired_leases(
    session: Session, scope: str, stale_s: float, limit: int = 500, overdue_s: float | None = None
) -> list[tuple[int, str, str | None, int, int, bool]]:
    """Running documents of the deployment `scope` whose lease ran out: (id, run id, owner,
    fence, reclaims so far, overdue: it ran out more than `overdue_s` ago). The owner is None
    for one released or reclaimed whose next delivery has not started it in time. Another deployment's (another broker's) workers are not seen alive from here,
    so their documents are left to them, unless their lease ran out `stale_s` ago (no live
    worker lets that happen: the deployment's id changed with a Redis that lost its data, say)."""
    now = clock.now(session)
    rows = session.execute(
        select(
            Document.id,
            Document.run_id,
            Document.lease_owner,
            Document.fence,
            Document.reclaims,
            Document.lease_expires_at,
        )
        .where(
            Document.status == DocStatus.RUNNING,
            or_(
                and_(Document.lease_scope == scope, Document.lease_expires_at < now),
                Document.lease_expires_at < now - timedelta(seconds=stale_s),
            ),
        )
        .order_by(Document.lease_expires_at)
        .limit(limit)
    )
    late = None if overdue_s is None else now - timedelta(seconds=overdue_s)
    return [
        (int(i), str(run), owner, int(fence), int(n), bool(late and expires and aware(expires) < late))
        for i, run, owner, fence, n, expires in rows.tuples()
    ]


def reclaim_expired(
    session: Session, document_id: int, owner: str | None, fence: int, grace_s: float
) -> bool:
    """Clear the expired lease of a dead `owner` (only if it is still that lease), counting
    the reclaim; True when this caller did it and should send the document again. The new
    delivery has `grace_s` to start it, or it is reclaimed again.

    A row another transaction holds is left for a later beat (False), not waited for: a worker
    paused inside a transaction holds it until Postgres ends that transaction (its idle timeout,
    30 s), and the heartbeat that waited would renew none of its own leases meanwhile."""
    free = session.scalar(
        select(Document.id).where(Document.id == document_id).with_for_update(skip_locked=True)
    )
    if free is None:
        return False
    now = clock.now(session)
    result = session.execute(
        update(Document)
        .where(
            Document.id == document_id,
            Document.status == DocStatus.RUNNING,
            Document.lease_owner.is_(None) if owner is None else Document.lease_owner == owner,
            Document.fence == fence,
            Document.lease_expires_at < now,
        )
        .values(**_reclaimed(now, grace_s, owner))
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def _reclaimed(now: datetime, grace_s: float, owner: str | None) -> dict[str, Any]:
    """Released for a new delivery (`_released`), the reclaim counted and its dead owner kept."""
    return {
        **released_columns(now, grace_s),
        "fence": Document.fence + 1,  # the old holder, should it wake, can write nothing from now
        "reclaims": Document.reclaims + 1,
        "reclaimed_from": owner if owner is not None else Document.reclaimed_from,
    }


def reclaim_unstarted(
    session: Session, document_ids: Iterable[int], owner: str, grace_s: float, scope: str
) -> list[tuple[int, str]]:
    """Of the documents a dead `owner` had received, those it never started (still pending):
    released for a new delivery as a reclaim is, counting the reclaim; (id, run id) of each.
    The new delivery has `grace_s` to start it, or the heartbeat's reclaim (of the deployment
    `scope`) sends it again."""
    ids, now = sorted(document_ids), clock.now(session)
    taken: list[tuple[int, str]] = []
    for start in range(0, len(ids), MAX_IDS_PER_STATEMENT):
        rows = session.execute(
            update(Document)
            .where(
                Document.id.in_(ids[start : start + MAX_IDS_PER_STATEMENT]),
                Document.status == DocStatus.PENDING,
            )
            .values(status=DocStatus.RUNNING, lease_scope=scope, **_reclaimed(now, grace_s, owner))
            .returning(Document.id, Document.run_id)
            .execution_options(synchronize_session=False)
        )
        taken += [(int(document_id), str(run_id)) for document_id, run_id in rows.tuples()]
    return taken
