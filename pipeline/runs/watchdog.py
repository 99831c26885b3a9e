"""The watchdog: runs with no activity for a while are resumed, or marked stalled.

Beat runs it every `PIPELINE_WATCHDOG_INTERVAL_S` (`pipeline watchdog` runs it once, for
cron). Activity is anything a worker writes for the run: a document finished, a chunk
answered, an LLM call recorded (even a failed one: a run that is retrying through a provider
outage is alive, and resuming it would only add duplicate tasks), and a document's lease
until it runs out (a lease is renewed only while its work makes progress; a deferred
document's waits for its retry). All of it is read on the database's clock.

A run idle for `watchdog_idle_s` is resumed (what `pipeline resume` does). When it stays
idle after `watchdog_max_resumes` resumes, resuming is not helping (no worker consumes the
queues, or every attempt dies): the run is marked `stalled` with the reason, for an
operator. `pipeline resume RUN` still works on a stalled run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pipeline.core.settings import Settings
from pipeline.runs.resume import ResumePlan, plan_resume
from pipeline.storage import activity, clock, run_state, runs
from pipeline.storage.db import session_scope
from pipeline.storage.models import RunStatus, aware

if TYPE_CHECKING:
    from sqlalchemy import Engine

WATCHED_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING)


@dataclass
class Verdict:
    run_id: str
    action: str
    """"resume" (the plan is to be enqueued) or "stalled"."""
    idle_s: float
    plan: ResumePlan | None = None


def check(
    engine: Engine,
    settings: Settings,
    run_ids: Sequence[str] | None = None,
    workers_alive: int | None = None,
) -> list[Verdict]:
    """One pass over the unfinished runs (or those of `run_ids`); returns what to resume (the
    caller enqueues the plans) and what was marked stalled. `workers_alive`: the worker
    processes with a live heartbeat (None: not known); with none, an idle run is stalled at
    once, since a resume would only fill queues nobody reads."""
    idle_limit = timedelta(seconds=settings.watchdog_idle_s)
    verdicts: list[Verdict] = []
    with session_scope(engine) as session:
        now = clock.now(session)  # the clock every activity below was written on
        watched = runs.runs_with_status(session, WATCHED_STATUSES, run_ids)
        idle = {run.id: now - activity.last_activity(session, run) for run in watched}
    for run in watched:
        if run.mode == "batch" and run.dispatched_at is None:
            continue  # its batches are polled (the heartbeat restarts a lost poll), not resumed
        if idle[run.id] < idle_limit:
            if run.resumes:  # progress since the last resume: start counting again
                _set_resumes(engine, run.id, 0)
            continue
        if run.resumed_at is not None and now - aware(run.resumed_at) < idle_limit:
            continue  # resumed recently: give it time
        idle_s = idle[run.id].total_seconds()
        reason = None
        if workers_alive == 0:
            reason = (
                f"stalled: no activity for {idle_s / 60:.0f} min and no worker is alive (no heartbeat "
                "in Redis): start workers, then `pipeline resume`"
            )
        elif run.resumes >= settings.watchdog_max_resumes:
            reason = (
                f"stalled: no activity for {idle_s / 60:.0f} min after {run.resumes} resumes "
                "(are workers consuming the queues?); `pipeline resume` enqueues it again"
            )
        if reason is not None:
            with session_scope(engine) as session:
                stalled = run_state.move_run(session, run.id, "stall", error=reason)
            if stalled:  # not when it ended meanwhile
                verdicts.append(Verdict(run.id, "stalled", idle_s))
            continue
        plan = plan_resume(engine, run.id, stale_after_s=settings.watchdog_idle_s)
        _set_resumes(engine, run.id, run.resumes + 1, resumed_at=now)
        verdicts.append(Verdict(run.id, "resume", idle_s, plan))
    return verdicts


def _set_resumes(engine: Engine, run_id: str, resumes: int, resumed_at: datetime | None = None) -> None:
    with session_scope(engine) as session:
        activity.set_resumes(session, run_id, resumes, resumed_at)
