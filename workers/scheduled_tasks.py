"""The periodic tasks beat sends (`workers.app.beat_schedule`): the watchdog of idle runs, the
nightly run of the inbox, and the pruning of old runs' texts.
"""

from __future__ import annotations

import logging
import socket

from pipeline.context import Context
from pipeline.core.errors import ConfigError, InputError
from pipeline.runs.mode import SENT_AT_ONCE
from workers.app import app
from workers.context import redis_client, worker_context

log = logging.getLogger(__name__)


@app.task(name="pipeline.watchdog", ignore_result=True)
def watchdog() -> dict[str, list[str]]:
    """Periodic (beat): resume runs without activity, mark stalled those resuming cannot help."""
    from workers.canvas import resume_idle_runs

    ctx = worker_context()
    outcome: dict[str, list[str]] = {"resumed": [], "stalled": []}
    for verdict in resume_idle_runs(ctx.engine, ctx.settings):
        outcome["resumed" if verdict.plan is not None else "stalled"].append(verdict.run_id)
        log.warning("watchdog: run %s idle %.0f s: %s", verdict.run_id, verdict.idle_s, verdict.action)
    return outcome


@app.task(name="pipeline.nightly")
def nightly(inbox: str | None = None, slot: str | None = None) -> str:
    """Periodic (beat, PIPELINE_INBOX_SCHEDULE): submit the inbox's new content as a run; the
    run's id, or what happened in words.

    `inbox` is beat's PIPELINE_INBOX (the worker's own when beat sent none). The task runs on a
    worker, so the path must be readable there (a shared volume or directory): when it is not,
    the worker says so at ERROR, naming the path, its host and the fix, and so does the result.
    `slot` is the scheduled minute beat fires for: the first task of an inbox's slot submits,
    any other for that slot (a second beat's, a standby's catching up) submits nothing."""
    from pipeline.runs.nightly import claim_slot

    ctx = worker_context()
    path = inbox or ctx.settings.inbox
    if slot is not None and path:
        taken = claim_slot(redis_client(), path, slot, f"worker {ctx.leases.owner}")
        if taken is not None:
            log.warning("nightly: %s for %s was submitted already (%s): not again", path, slot, taken)
            return f"already submitted: {path} for {slot} ({taken})"
    try:
        outcome = _submit_nightly(ctx, path)
    except BaseException:
        if slot is not None and path:
            _settle_slot(path, slot, None)
        raise
    if slot is not None and path:
        _settle_slot(path, slot, outcome)
    return outcome


def _settle_slot(path: str, slot: str, outcome: str | None) -> None:
    """The slot's claim says what came of it; a submit that failed frees it for another fire."""
    from pipeline.runs.nightly import free_slot, slot_taken_by

    if outcome is None or outcome.startswith("error: "):
        free_slot(redis_client(), path, slot)
    else:
        slot_taken_by(redis_client(), path, slot, outcome if " " in outcome else f"run {outcome}")


def _submit_nightly(ctx: Context, path: str | None) -> str:
    from pipeline.runs.inbox import inbox_problem
    from pipeline.runs.mode import fix_deadline
    from pipeline.runs.nightly import prepare_nightly
    from workers.canvas import enqueue_early, start_run

    host = socket.gethostname()
    problem = inbox_problem(path, host)
    plan = None
    settings = ctx.settings
    if problem is None:
        early = enqueue_early if ctx.settings.llm_mode in SENT_AT_ONCE else None
        try:
            # The deadline fixed before the inbox is stored, as submit does (issue 47).
            settings = fix_deadline(ctx.engine, ctx.settings)
            plan = prepare_nightly(ctx.engine, settings.model_copy(update={"inbox": path}), on_early=early)
        except (InputError, ConfigError) as exc:
            problem = f"nightly run not started on worker host {host}: {exc}"
    if plan is None:
        problem = problem or f"nightly run not started on worker host {host}: no inbox"
        log.error("%s", problem)
        return f"error: {problem}"
    log.info(
        "nightly: %s: %d new, %d skipped, %d processed before",
        path,
        plan.submitted,
        len(plan.rejected),
        len(plan.already_processed),
    )
    if plan.submitted:
        start_run(ctx.engine, settings, plan)
    if plan.created:
        return plan.run_id
    return f"nothing new in {path} ({len(plan.already_processed)} files processed before)"


@app.task(name="pipeline.prune")
def prune(older_than_s: float | None = None) -> dict[str, object]:
    """Nightly (beat, with PIPELINE_RETENTION_DAYS): the filing texts, chunks and call rows of
    the final runs that ended more than `older_than_s` ago (beat's; the worker's own
    PIPELINE_RETENTION_DAYS when beat sent none) are deleted (`pipeline.runs.retention`). What
    went, in numbers; autovacuum reclaims the space."""
    from pipeline.runs.retention import prune_runs

    ctx = worker_context()
    days = ctx.settings.retention_days
    if older_than_s is None and days is None:
        log.error("prune: no age given and PIPELINE_RETENTION_DAYS is not set here: nothing pruned")
        return {"error": "no age: PIPELINE_RETENTION_DAYS is not set"}
    outcome = prune_runs(ctx.engine, older_than_s if older_than_s is not None else float(days or 0) * 86_400)
    total = outcome.total
    for run in outcome.left:
        log.warning("prune: run %s is %s, not final: left whatever its age", run.run_id, run.status)
    log.info(
        "prune: %d runs that ended before %s: %d filing texts, %d chunks, %d call rows, %d bytes",
        len(outcome.pruned),
        outcome.cutoff.isoformat(timespec="seconds"),
        total.texts,
        total.chunks,
        total.calls,
        total.bytes,
    )
    return {
        "runs": [run.run_id for run in outcome.pruned],
        "left": [run.run_id for run in outcome.left],
        **total.as_dict(),
        "bytes": total.bytes,
    }
