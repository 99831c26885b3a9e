"""Finalize, resume and the watchdog: a run's status, its documents' counts, whether it has a report."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exists, func, select, update
from sqlalchemy.orm import Session

from pipeline.storage import clock, lifecycle
from pipeline.storage.models import (
    TERMINAL_DOC_STATUSES,
    Document,
    Extraction,
    Report,
    Run,
    RunStatus,
)


def move_run(
    session: Session,
    run_id: str,
    name: str,
    status: RunStatus | None = None,
    error: str | None = None,
    *,
    clear_error: bool = False,
) -> bool:
    """Make the run's move `name` of the lifecycle table (to `status`, where the move has more
    than one target), only from one of its sources; whether it moved. A late writer (a stall
    decided before a report landed, a cancel after it) changes nothing. A run moving to running
    has no finish time; `clear_error`: nor its error (a retry)."""
    step = lifecycle.move(lifecycle.RUN_MOVES, name)
    target = status or step.targets[0]
    if target not in step.targets:
        raise ValueError(f"the move {name!r} goes to {', '.join(step.targets)}, not {target}")
    values: dict[str, Any] = {"status": target}
    if target == RunStatus.RUNNING:
        values["started_at"] = clock.now(session)
        values["finished_at"] = None
    if target in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
        values["finished_at"] = clock.now(session)
    if error is not None or clear_error:
        values["error"] = error
    moved = session.execute(
        update(Run).where(Run.id == run_id, Run.status.in_(step.sources)).values(**values)
    )
    return bool(moved.rowcount)  # type: ignore[attr-defined]


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


def run_of_document(session: Session, document_id: int) -> str | None:
    """The document's run, once the producer has stored all of the run's documents."""
    return session.scalar(
        select(Document.run_id)
        .join(Run, Run.id == Document.run_id)
        .where(Document.id == document_id, Run.stored_at.is_not(None))
    )


def mark_stored(session: Session, run_id: str) -> None:
    session.execute(update(Run).where(Run.id == run_id).values(stored_at=clock.now(session)))


def is_stored(session: Session, run_id: str) -> bool:
    """Whether the producer has stored all of the run's documents."""
    return session.scalar(select(Run.stored_at).where(Run.id == run_id)) is not None


def revive(session: Session, run_id: str) -> None:
    """A stalled run goes back to running: one of its documents just ended, so it moves (the
    watchdog had seen no activity, e.g. through a provider's long pause). A no-op otherwise,
    and no row lock unless the run is stalled."""
    session.execute(
        update(Run)
        .where(Run.id == run_id, Run.status.in_(lifecycle.move(lifecycle.RUN_MOVES, "revive").sources))
        .values(status=RunStatus.RUNNING)
    )


def set_mode(
    session: Session,
    run_id: str,
    mode: str,
    reason: str,
    deadline: datetime | None,
    tier: tuple[str | None, datetime | None] = (None, None),
) -> None:
    """The run's mode (sync, flex or batch), why, its deadline, and `tier`: the tier of its
    synchronous extract calls and from when flex gives way to the standard tier."""
    extract_tier, standard_from = tier
    session.execute(
        update(Run)
        .where(Run.id == run_id)
        .values(
            mode=mode,
            mode_reason=reason,
            deadline=deadline,
            extract_tier=extract_tier,
            standard_from=standard_from,
        )
    )


def set_tier(
    session: Session, run_id: str, extract_tier: str | None, standard_from: datetime | None, reason: str
) -> None:
    """The planner's tier for what the batch path hands over at its cutover, and why."""
    session.execute(
        update(Run)
        .where(Run.id == run_id)
        .values(extract_tier=extract_tier, standard_from=standard_from, tier_reason=reason)
    )


def run_status(session: Session, run_id: str) -> str | None:
    return session.scalar(select(Run.status).where(Run.id == run_id))


def report_exists(session: Session, run_id: str) -> bool:
    return session.scalar(select(func.count()).where(Report.run_id == run_id)) == 1


def stranded_runs(session: Session, quiet_s: float, scope: str) -> list[str]:
    """Running (or stalled) runs of the deployment `scope` (its workers leased their documents),
    fully stored, whose documents are all final, none for `quiet_s`, and with no report: the chord's callback that
    would report them was lost (Redis restarted, a header task's worker died). Finalize reports
    them."""
    cutoff = clock.now(session) - timedelta(seconds=quiet_s)  # the clock documents end on
    unfinished = exists().where(Document.run_id == Run.id, Document.status.not_in(TERMINAL_DOC_STATUSES))
    recent = exists().where(Document.run_id == Run.id, Document.finished_at > cutoff)
    ours = exists().where(Document.run_id == Run.id, Document.lease_scope == scope)
    reported = exists().where(Report.run_id == Run.id)
    found = session.scalars(
        select(Run.id).where(
            Run.status.in_((RunStatus.RUNNING, RunStatus.STALLED)),
            Run.stored_at.is_not(None),  # never before the producer stored all of it
            Run.created_at < cutoff,
            ours,
            ~unfinished,
            ~recent,
            ~reported,
        )
    )
    return list(found)
