"""Extract: a document's attempts, its chunks' answers, its extraction and risk factors.

Delivery is at-least-once, so writes are upserts keyed on the document (and chunk), and
status changes never move a document out of a final state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel
from sqlalchemy import ColumnElement, and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from pipeline.core.constants import PROMPT_VERSION
from pipeline.core.errors import LeaseLost
from pipeline.storage import clock
from pipeline.storage.fit import fitted, json_safe
from pipeline.storage.models import (
    TERMINAL_DOC_STATUSES,
    Chunk,
    Content,
    DocStatus,
    Document,
    Extraction,
    RiskFactor,
    Run,
    aware,
    table_of,
    utcnow,
)
from pipeline.storage.upsert import upsert

if TYPE_CHECKING:
    from pipeline.extraction.grounding import GroundedExtraction


@dataclass(frozen=True)
class RunOfDocument:
    """What extracting a document needs of its run (a run that is gone: the defaults)."""

    schema: str | None = None
    query: str = ""
    reuse_answers: bool = False
    budget_usd: float | None = None


def text_and_run(session: Session, doc: Document) -> tuple[str, RunOfDocument]:
    """The document's text and what its extraction needs of its run, in one query."""
    found = session.execute(
        select(Content.text, Run.schema, Run.query, Run.reuse_answers, Run.budget_usd, Run.id)
        .select_from(Content)
        .outerjoin(Run, Run.id == doc.run_id)
        .where(Content.sha256 == doc.sha256)
    ).first()
    if found is None or found.text is None:  # None: `pipeline prune` dropped it
        raise LookupError(f"document {doc.id} has no stored text")
    if found.id is None:
        return found.text, RunOfDocument()
    return found.text, RunOfDocument(
        found.schema, found.query or "", bool(found.reuse_answers), found.budget_usd
    )


def document_text(session: Session, doc: Document) -> str:
    text = session.scalar(select(Content.text).where(Content.sha256 == doc.sha256))
    if text is None:
        raise LookupError(f"document {doc.id} has no stored text")
    return text


def start_document(
    session: Session,
    document_id: int,
    max_attempts: int,
    owner: str,
    lease_s: float,
    *,
    scope: str = "",
    mine_idle: bool = False,
) -> Document | None:
    """Lease the document to `owner` for `lease_s`, raise its fencing token and count the
    attempt; None when it is final, when another lease on it is live (this delivery is a
    duplicate: a redelivery, a resume, a reclaim), or when it has used up its attempts (it is
    failed then, with the last error it met). `mine_idle`: no thread of `owner` works on it,
    so a live lease of `owner`'s is a leftover (one it could not release) and is taken over.
    `scope`: the deployment whose workers may reclaim it (see `expired_leases`).

    Attempts that end in a retry the task layer handles are handed back (`hand_back_attempt`),
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
    if mine_idle:
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
    return _start_otherwise(session, document_id, max_attempts, owner, lease, mine_idle=mine_idle)


def _start_otherwise(
    session: Session,
    document_id: int,
    max_attempts: int,
    owner: str,
    lease: dict[str, Any],
    *,
    mine_idle: bool,
) -> Document | None:
    """`start_document` where its one statement changed nothing: why, and the lease should the
    document have come free since (a failure once its attempts are used up)."""
    doc = session.get(Document, document_id, with_for_update=True)
    if doc is None or doc.status in TERMINAL_DOC_STATUSES:
        return None
    now = clock.now(session)
    if doc.status == DocStatus.RUNNING and doc.lease_owner == owner:
        if not mine_idle:  # a thread of this process works on it, its lease late or not
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
    raises LeaseLost when another lease took it over, or it is already final."""
    held = session.execute(_HOLD, {"held_id": document_id, "held_fence": fence})
    if not held.rowcount:  # type: ignore[attr-defined]
        _lost(session, document_id, fence)


def _lost(session: Session, document_id: int, fence: int) -> NoReturn:
    found = session.execute(select(Document.status, Document.fence).where(Document.id == document_id)).first()
    state = "missing" if found is None else f"{found.status}, lease {found.fence}"
    raise LeaseLost(f"document {document_id} is no longer held by lease {fence} ({state})")


def release_lease(session: Session, document_id: int, fence: int, grace_s: float) -> None:
    """The holder stops working on the document without ending it (a retry is to be queued):
    the next delivery may lease it at once. If none has started it `grace_s` from now (the
    retry was lost with the broker, say), a live worker reclaims it."""
    session.execute(
        update(Document)
        .where(Document.id == document_id, Document.fence == fence, Document.status == DocStatus.RUNNING)
        .values(**_released(clock.now(session), grace_s))
    )


def _released(now: datetime, grace_s: float) -> dict[str, Any]:
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


def take_back(session: Session, document_id: int, owner: str | None, fence: int, grace_s: float) -> bool:
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
        **_released(now, grace_s),
        "fence": Document.fence + 1,  # the old holder, should it wake, can write nothing from now
        "reclaims": Document.reclaims + 1,
        "reclaimed_from": owner if owner is not None else Document.reclaimed_from,
    }


MAX_IDS_PER_STATEMENT = 1000
"""An `IN` list is cut into statements of at most this many ids: Postgres takes 65,535 bound
parameters in one, and a received set can grow past that (a prefork worker's, say)."""


def take_back_deliveries(
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


def hand_back_attempt(session: Session, document_id: int, fence: int, grace_s: float) -> None:
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
        .values(attempts=Document.attempts - 1, **_released(clock.now(session), grace_s))
    )


def note_attempt_error(session: Session, document_id: int, reason: str, owner: str) -> None:
    """Keep the error of a failed attempt that will be retried: the reason if it gives up
    (unless another worker holds the document now)."""
    session.execute(
        update(Document)
        .where(Document.id == document_id, Document.status.not_in(TERMINAL_DOC_STATUSES), _unheld_or(owner))
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
    )
)


def save_chunk_result(
    session: Session, chunk: Chunk, fence: int, result: BaseModel, *, model: str, prompt_version: str
) -> None:
    """Store a chunk's answer, if lease `fence` still holds its document."""
    hold(session, chunk.document_id, fence)
    session.execute(
        _SAVE_CHUNK,
        {
            "chunk_id": chunk.id,
            "answer": json_safe(result.model_dump(mode="json")),
            "answer_model": model,
            "answer_version": prompt_version,
            "answered_at": clock.now(session),
        },
    )


_DELETE_RISKS = delete(table_of(RiskFactor)).where(
    table_of(RiskFactor).c.document_id == bindparam("risks_of")
)


def save_extraction(
    session: Session,
    doc: Document,
    checked: GroundedExtraction,
    *,
    model: str,
    prompt_version: str,
    summary: str | None = None,
) -> None:
    """Upsert the document's extraction (with its summary when there is one) and replace its
    risk factors (`mark_extracted` ends the document in the same transaction).

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
            },
        )
        for i, (r, check) in enumerate(zip(extraction.risk_factors, checked.risks, strict=True))
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


def _upsert_extraction(session: Session, doc: Document, **columns: Any) -> None:
    """Insert or replace the document's `extractions` row with `columns`, fitted to them (a
    model's answer may be longer than a column, or hold a NUL: `pipeline.storage.fit`)."""
    row = fitted(Extraction, {"document_id": doc.id, "run_id": doc.run_id, **columns, "created_at": utcnow()})
    upsert(session, Extraction, [row], ["document_id"], [k for k in row if k != "document_id"])


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


def cancel_documents(
    session: Session, run_id: str, reason: str, document_ids: Sequence[int] | None = None
) -> int:
    """End the run's unfinished documents (or those of `document_ids` still unfinished)
    `cancelled` with `reason`; how many. The fence is raised, so a holder still at work writes
    nothing more (`LeaseLost`), and no delivery starts a cancelled document again."""
    stmt = update(Document).where(
        Document.run_id == run_id, Document.status.in_((DocStatus.PENDING, DocStatus.RUNNING))
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
