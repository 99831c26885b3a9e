"""A document's lease and its holder's moves: start (lease it), hold (check the fence before a
write), renew, release or hand back the attempt for a retry, and end it extracted or failed.

Delivery is at-least-once, so every move names the fence its holder took: a holder whose lease
was taken over (`pipeline.storage.reclaims`) writes nothing, and no move takes a document out of
a final state (`pipeline.storage.lifecycle`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NoReturn

from sqlalchemy import ColumnElement, and_, bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from pipeline.core.errors import DeletedFromDatabase, LeaseLost
from pipeline.storage import clock
from pipeline.storage.models import TERMINAL_DOC_STATUSES, DocStatus, Document, aware, table_of


def start_document(
    session: Session,
    document_id: int,
    max_attempts: int,
    owner: str,
    lease_s: float,
    *,
    scope: str = "",
    owner_idle: bool = False,
) -> Document | None:
    """Lease the document to `owner` for `lease_s`, raise its fencing token and count the
    attempt; None when it is final, when another lease on it is live (this delivery is a
    duplicate: a redelivery, a resume, a reclaim), or when it has used up its attempts (it is
    failed then, with the last error it met). `owner_idle`: no thread of `owner` works on it,
    so a live lease of `owner`'s is a leftover (one it could not release) and is taken over.
    `scope`: the deployment whose workers may reclaim it (see `expired_leases`).

    Attempts that end in a retry the task layer handles are handed back (`release_for_retry`),
    so the stored count is of deliveries that never came back: a worker died or was lost.
    It holds across redeliveries, reclaims and resumes, so a document that kills its worker
    cannot loop forever; transient errors are bounded by PIPELINE_TASK_MAX_RETRIES instead.
    """
    now = clock.now(session)
    lease = {
        "status": DocStatus.RUNNING,
        "attempts": Document.attempts + 1,
        "fence": Document.fence + 1,
        "lease_owner": owner,
        "lease_scope": scope,
        "lease_expires_at": now + timedelta(seconds=lease_s),
    }
    # The common case in one statement (its row lock lasts to the end of the transaction): the
    # document is not final, has attempts left, and no live lease of another's holds it.
    free = [
        Document.status != DocStatus.RUNNING,
        Document.lease_owner.is_(None),
        and_(
            Document.lease_owner != owner,
            or_(Document.lease_expires_at.is_(None), Document.lease_expires_at <= now),
        ),
    ]
    if owner_idle:
        free.append(Document.lease_owner == owner)
    doc = session.scalars(
        update(Document)
        .where(
            Document.id == document_id,
            Document.status.not_in(TERMINAL_DOC_STATUSES),
            Document.attempts < max_attempts,
            or_(*free),
        )
        .values(**lease, started_at=func.coalesce(Document.started_at, now))
        .returning(Document)
        .execution_options(synchronize_session=False, populate_existing=True)
    ).first()
    if doc is not None:
        return doc
    return _start_otherwise(session, document_id, max_attempts, owner, lease, owner_idle=owner_idle)


def _start_otherwise(
    session: Session,
    document_id: int,
    max_attempts: int,
    owner: str,
    lease: dict[str, Any],
    *,
    owner_idle: bool,
) -> Document | None:
    """`start_document` where its one statement changed nothing: why, and the lease should the
    document have come free since (a failure once its attempts are used up)."""
    doc = session.get(Document, document_id, with_for_update=True)
    if doc is None or doc.status in TERMINAL_DOC_STATUSES:
        return None
    now = clock.now(session)
    if doc.status == DocStatus.RUNNING and doc.lease_owner == owner:
        if not owner_idle:  # a thread of this process works on it, its lease late or not
            return None
    elif (
        doc.status == DocStatus.RUNNING
        and doc.lease_owner
        and doc.lease_expires_at
        and aware(doc.lease_expires_at) > now
    ):
        return None
    if doc.attempts >= max_attempts:
        last = doc.error or "the task never finished (its worker was lost, or it was requeued)"
        _finish_document(
            session, doc.id, DocStatus.FAILED, f"gave up after {doc.attempts} attempts; last: {last}"
        )
        return None
    # Compare-and-set on the fence read above: where the row lock is a no-op (SQLite), two
    # deliveries that both read the document free cannot both win it.
    granted = session.execute(
        update(Document)
        .where(Document.id == document_id, Document.fence == doc.fence)
        .values(**lease, started_at=doc.started_at or now)
        .execution_options(synchronize_session=False)
    )
    if not granted.rowcount:  # type: ignore[attr-defined]
        return None
    session.refresh(doc)
    return doc


_DOCUMENTS = table_of(Document)
_HELD = (
    _DOCUMENTS.c.id == bindparam("held_id"),
    _DOCUMENTS.c.fence == bindparam("held_fence"),
    _DOCUMENTS.c.status == DocStatus.RUNNING,
)
"""The document is running under lease `held_fence` (`lifecycle`: the holder's moves)."""
_HOLD = update(_DOCUMENTS).where(*_HELD).values(fence=_DOCUMENTS.c.fence)
"""`hold`'s statement, built once: it runs before every write a lease makes."""
_FINAL: dict[str, Any] = {
    "status": bindparam("final_status"),
    "finished_at": bindparam("final_at"),
    "lease_owner": None,
    "lease_expires_at": None,
}


def hold(session: Session, document_id: int, fence: int) -> None:
    """Lock the document for a write by the holder of lease `fence` (an UPDATE that changes
    nothing: a row lock on Postgres, the write lock on SQLite, to the end of the transaction);
    raises LeaseLost when another lease took it over, or it is already final, and
    DeletedFromDatabase when it was deleted (`pipeline prune --all`)."""
    held = session.execute(_HOLD, {"held_id": document_id, "held_fence": fence})
    if not held.rowcount:  # type: ignore[attr-defined]
        _lost(session, document_id, fence)


def _lost(session: Session, document_id: int, fence: int) -> NoReturn:
    found = session.execute(select(Document.status, Document.fence).where(Document.id == document_id)).first()
    if found is None:  # it was leased, so issued: deleted since (`pipeline prune --all`), no new holder
        url = session.get_bind().engine.url.render_as_string(hide_password=True)
        raise DeletedFromDatabase(f"document {document_id}", url)
    raise LeaseLost(
        f"document {document_id} is no longer held by lease {fence} ({found.status}, lease {found.fence})"
    )


def release_lease(session: Session, document_id: int, fence: int, grace_s: float) -> None:
    """The holder stops working on the document without ending it (a retry is to be queued):
    the next delivery may lease it at once. If none has started it `grace_s` from now (the
    retry was lost with the broker, say), a live worker reclaims it."""
    session.execute(
        update(Document)
        .where(Document.id == document_id, Document.fence == fence, Document.status == DocStatus.RUNNING)
        .values(**released_columns(clock.now(session), grace_s))
    )


def released_columns(now: datetime, grace_s: float) -> dict[str, Any]:
    """No owner, and a reclaim only if no delivery starts the document within `grace_s` of `now`."""
    return {"lease_owner": None, "lease_expires_at": now + timedelta(seconds=grace_s)}


def expect_retry(session: Session, document_id: int, grace_s: float) -> None:
    """A released document's retry comes within `grace_s`: reclaim waits until then."""
    session.execute(
        update(Document)
        .where(
            Document.id == document_id,
            Document.status == DocStatus.RUNNING,
            Document.lease_owner.is_(None),
        )
        .values(lease_expires_at=clock.now(session) + timedelta(seconds=grace_s))
    )


def renew_leases(session: Session, held: dict[int, int], lease_s: float) -> None:
    """Extend the leases `held` ({document id: fence}) by `lease_s` from now (those still
    this holder's)."""
    until = clock.now(session) + timedelta(seconds=lease_s)
    for document_id, fence in held.items():
        session.execute(
            update(Document)
            .where(Document.id == document_id, Document.fence == fence, Document.status == DocStatus.RUNNING)
            .values(lease_expires_at=until)
        )


def release_for_retry(session: Session, document_id: int, fence: int, grace_s: float) -> None:
    """The attempt ended in a retry the task layer handles (a transient error, the limiter,
    the time budget): it does not count against the document's attempts, and the lease is
    released for the retry's delivery (see `release_lease`)."""
    session.execute(
        update(Document)
        .where(
            Document.id == document_id,
            Document.fence == fence,
            Document.status == DocStatus.RUNNING,
            Document.attempts > 0,
        )
        .values(attempts=Document.attempts - 1, **released_columns(clock.now(session), grace_s))
    )


def note_attempt_error(session: Session, document_id: int, reason: str, owner: str) -> None:
    """Keep the error of a failed attempt that will be retried: the reason if it gives up
    (unless another worker holds the document now)."""
    session.execute(
        update(Document)
        .where(Document.id == document_id, Document.status.not_in(TERMINAL_DOC_STATUSES), _unheld_or(owner))
        .values(error=reason)
    )


def mark_extracted(session: Session, document_id: int, fence: int) -> None:
    """End the document `extracted`, if lease `fence` holds it (LeaseLost otherwise): the
    lock and the check of `hold` in the same statement, so the closing write can begin with it."""
    final = {
        "held_id": document_id,
        "held_fence": fence,
        "final_status": DocStatus.EXTRACTED,
        "final_at": clock.now(session),
    }
    if not session.execute(_FINISH_HELD, final).rowcount:  # type: ignore[attr-defined]
        _lost(session, document_id, fence)


def fail_document(session: Session, document_id: int, reason: str, fence: int | None) -> None:
    """Fail the document with `reason`, for the attempt that held lease `fence`: unless a later
    lease or a reclaim moved the fence on since (the attempt's verdict is then stale: its
    document is someone else's now). `fence` None: the delivery never leased the document, which
    is failed only if nobody has started it either."""
    held = (
        Document.status == DocStatus.PENDING
        if fence is None
        else and_(Document.fence == fence, Document.status == DocStatus.RUNNING)
    )
    _finish_document(session, document_id, DocStatus.FAILED, reason, held)


def _unheld_or(owner: str) -> ColumnElement[bool]:
    """No lease is held on the document, or `owner` holds it."""
    return or_(Document.lease_owner.is_(None), Document.lease_owner == owner)


_FINISH = (
    update(_DOCUMENTS)
    .where(_DOCUMENTS.c.id == bindparam("held_id"), _DOCUMENTS.c.status.not_in(TERMINAL_DOC_STATUSES))
    .values(**_FINAL, error=bindparam("final_error"))
)
_FINISH_HELD = update(_DOCUMENTS).where(*_HELD).values(**_FINAL, error=None)


def _finish_document(
    session: Session, document_id: int, status: DocStatus, error: str | None, *also: ColumnElement[bool]
) -> None:
    if not also:  # every extracted document: the statement built once
        final = {
            "held_id": document_id,
            "final_status": status,
            "final_error": error,
            "final_at": clock.now(session),
        }
        session.execute(_FINISH, final)
        return
    session.execute(
        update(Document)
        .where(Document.id == document_id, Document.status.not_in(TERMINAL_DOC_STATUSES), *also)
        .values(
            status=status,
            error=error,
            finished_at=clock.now(session),
            lease_owner=None,
            lease_expires_at=None,
        )
    )
