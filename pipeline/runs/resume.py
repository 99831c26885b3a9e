"""Finishing an interrupted run: what is left to enqueue again (the Celery layer sends it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from pipeline.storage import clock, document_status, run_state, runs
from pipeline.storage.db import session_scope
from pipeline.storage.models import DocStatus, RunStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine

DEFAULT_STALE_AFTER_S = 600.0
"""A running document with no progress (start or answered chunk) for this long is presumed
orphaned by a dead worker; below it, its worker is presumed alive and it is left alone."""


@dataclass
class ResumePlan:
    run_id: str
    document_ids: list[int] = field(default_factory=list)
    has_report: bool = False
    left_running: int = 0
    """Documents still running recently: not enqueued again (their worker is presumably alive)."""
    batch_polls: bool = False
    """A batch run still on the batch path: its poll is started again, not its documents."""


def plan_resume(engine: Engine, run_id: str, stale_after_s: float = DEFAULT_STALE_AFTER_S) -> ResumePlan:
    """The documents to enqueue again: pending ones, and running ones without progress for
    `stale_after_s`; longest first. Marks the run running again when there is work."""
    plan = ResumePlan(run_id)
    with session_scope(engine) as session:
        cutoff = clock.now(session) - timedelta(seconds=stale_after_s)  # the clock chunks end on
        plan.has_report = run_state.report_exists(session, run_id)
        if plan.has_report:
            return plan
        run = runs.get_run(session, run_id)
        if run is not None and run.mode == "batch" and run.dispatched_at is None:
            plan.batch_polls = True
            if run.status != RunStatus.RUNNING:
                run_state.move_run(session, run_id, "resume")
            return plan
        rows = document_status.resumable(session, run_id, cutoff)
        plan.document_ids = [row.id for row in rows]
        running = document_status.running_count(session, run_id)
        plan.left_running = running - sum(1 for row in rows if row.status == DocStatus.RUNNING)
        run = runs.get_run(session, run_id)
        if run is not None and run.status != RunStatus.RUNNING:
            run_state.move_run(session, run_id, "resume")
    return plan
