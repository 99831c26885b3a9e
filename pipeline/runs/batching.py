"""A run in batch mode: its chunks' requests go to the provider's Batch API at half price, and
whatever the batches have not answered by the time the deadline needs it goes synchronously.

The batch path only fills in chunk answers. Each output line is read as a synchronous answer
would be (validated, repaired once with a synchronous call, the rest of a cut-off answer asked
for) and stored on its chunk, with its call record at batch prices. When every chunk is answered
or out of batch tries, or when the deadline leaves just the time the synchronous path needs,
the run is handed to the synchronous path (`dispatch`): the run's usual chord, whose extract
tasks find the answers stored (as a retry does) and ask only for the rest, under the global
limiter; compression and synthesis follow as in any run.

One tick at a time per run polls, ingests and submits (`tick`): a worker task that sends
itself again every `PIPELINE_BATCH_POLL_S`, restarted by the workers' heartbeat when its chain is
lost.

This module moves the rows on and watches the deadline; `batch_submit` sends the input files,
`batch_ingest` stores an ended batch's lines, `batch_lines` reads one line and `batch_settle`
makes the synchronous call a line needs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pipeline.context import Context, stop_check
from pipeline.core import errors
from pipeline.core.constants import PROMPT_VERSION
from pipeline.core.deadline import format_time
from pipeline.extraction.prompting import prompt_version
from pipeline.llm import stops
from pipeline.llm.batch import BatchAPI, BatchState
from pipeline.llm.circuit import endpoint_label
from pipeline.llm.ratelimit import Scope
from pipeline.runs.batch_ingest import ingest
from pipeline.runs.batch_submit import create_batch, submit, upload_again
from pipeline.runs.mode import sync_estimate_s, work_estimate
from pipeline.runs.tiers import LATE_CUTOVER, flex_need_s, plan_handover, standard_need_s
from pipeline.storage import batches as repo
from pipeline.storage import clock, run_state, runs
from pipeline.storage.db import session_scope
from pipeline.storage.models import LLMBatch, Run, RunStatus, aware

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)


def limits_in_force(ctx: Context) -> tuple[int, int]:
    """(rpm, tpm): the configured limits, or what the provider's headers said they are."""
    settings = ctx.settings
    rpm, tpm = settings.rate_limit_rpm, settings.rate_limit_tpm
    limiter = ctx.llm.limiter
    if limiter is not None:
        try:
            view = limiter.view(Scope(ctx.llm.endpoint, ctx.llm.model, 0))
            rpm, tpm = view.rpm_in_force or rpm, view.tpm_in_force or tpm
        except Exception as exc:  # Redis down: the configured limits stand
            log.debug("limits in force unknown: %s", exc)
    return rpm, tpm


def remaining_estimate_s(ctx: Context, run_id: str) -> float:
    """The synchronous path's time for what the run has not answered yet, and its report."""
    with session_scope(ctx.engine) as session:
        run = runs.get_run(session, run_id)
        version = prompt_version(run.schema, run.prompt_version) if run else PROMPT_VERSION
        chunks, tokens, documents = repo.remaining_work(session, run_id, version)
    calls, total = work_estimate(ctx.settings, chunks, tokens, documents)
    return sync_estimate_s(calls, total, *limits_in_force(ctx), ctx.settings.rate_limit_window_s)


def cutover_at(ctx: Context, run: Run) -> datetime | None:
    """When the run must leave the batch path to make its deadline (None: no deadline): in time
    for flex to answer the rest where the planner hands it to flex (`--mode auto`), else in
    time for the standard tier."""
    if run.deadline is None:
        return None
    sync_s = remaining_estimate_s(ctx, run.id)
    if run.extract_tier == "flex":  # a late poll's plan as it begins still finds flex in time
        need = flex_need_s(ctx.settings, sync_s) * (1 + LATE_CUTOVER) + ctx.settings.batch_poll_s
    else:
        need = standard_need_s(ctx.settings, sync_s)
    return aware(run.deadline) - timedelta(seconds=need)


def _plan_handover(ctx: Context, run: Run, now: datetime, cut: bool) -> None:
    """The planner's tier for what the batches leave to the synchronous path (an auto run with
    a deadline): flex if it still finishes in time, else the standard tier; kept on the run
    before its chord is sent."""
    if run.extract_tier is None or run.deadline is None:
        return
    why = (
        f"cutover at {format_time(now)}: the batches had not answered everything"
        if cut
        else "the batches ended before the deadline"
    )
    plan = plan_handover(ctx.settings, aware(run.deadline), remaining_estimate_s(ctx, run.id), now, why)
    log.info("run %s: %s", run.id, plan.reason)
    with session_scope(ctx.engine) as session:
        run_state.set_tier(session, run.id, plan.extract_tier, plan.standard_from, plan.reason)


@dataclass
class Tick:
    """What one tick did and what comes next."""

    dispatch: bool = False
    """The run leaves the batch path: send its documents to the synchronous path now."""
    done: bool = False
    """Nothing more for the batch path to do (dispatched before, or the run is gone)."""
    submitted: int = 0
    ingested: int = 0
    elsewhere: bool = False
    """The run's batches are at another endpoint: this worker left them alone (`tick`)."""


def tick(ctx: Context, run_id: str, chain_here: bool = False) -> Tick:
    """Advance the run's batches one step: each row to its next state, ended batches ingested,
    new files submitted while the enqueued-token budget allows, the deadline watched (on the
    database's clock: a cutover one host began, another goes on with). A cancelled run's
    batches are cancelled and what they answered before is ingested, nothing more is sent
    (`_wind_down`).

    Unless `chain_here` (the run's chain of polls ran in this deployment, on this endpoint),
    the tick first asks its endpoint for the run's newest batch: one this endpoint does not
    hold was sent to another (a restart or resume from a deployment on another endpoint), and
    is left alone: not polled, not given up, nothing sent here, the poll not marked."""
    with session_scope(ctx.engine) as session:
        run = runs.get_run(session, run_id)
        if run is None or run.dispatched_at is not None or run.mode != "batch":
            return Tick(done=True)
        sent = None if chain_here else repo.at_provider(session, run_id)
        session.expunge(run)
    api = BatchAPI(ctx.settings.llm_base_url or "", ctx.settings.api_key_value(), ctx.settings.llm_timeout_s)
    try:
        if sent is not None and not _held_here(api, *sent):
            log.warning(
                "run %s: its batch %s is not at this worker's endpoint %s: left to the workers of "
                "the endpoint that holds it",
                run_id,
                sent[0] or sent[1],
                endpoint_label(ctx.settings.llm_base_url or ""),
            )
            return Tick(done=True, elsewhere=True)
        with session_scope(ctx.engine) as session:
            repo.touch_poll(session, run_id)
        with stops.checked_by(stop_check(ctx, run_id)):  # a cancelled run's repairs are not asked for
            if run.status == RunStatus.CANCELLED:
                return _wind_down(ctx, api, run)
            return _tick(ctx, api, run)
    finally:
        api.close()


def _held_here(api: BatchAPI, batch_id: str | None, file_id: str | None) -> bool:
    """Whether this endpoint holds the batch (or file); yes when it cannot tell (down: the
    poll counts its failures as before)."""
    try:
        return api.holds(batch_id, file_id)
    except errors.PipelineError as exc:
        log.debug("batch %s: whether this endpoint holds it is unknown: %s", batch_id or file_id, exc)
        return True


def _wind_down(ctx: Context, api: BatchAPI, run: Run) -> Tick:
    """A cancelled run's batches: cancelled at the provider (`pipeline cancel` did so already,
    unless one was created as it ran), and the lines they answered before ingested, which were
    paid for (a retry reuses them; a line that needs a repair call is left unanswered). Done
    once none is open."""
    cancel_open_batches(ctx.engine, api, run.id, "run cancelled")
    outcome = Tick(ingested=_advance_rows(ctx, api, run, prompt_version(run.schema, run.prompt_version)))
    with session_scope(ctx.engine) as session:
        outcome.done = not repo.open_batches(session, run.id)
    return outcome


def _advance_rows(ctx: Context, api: BatchAPI, run: Run, version: str) -> int:
    """Each open batch row of the run moved on by one step; the lines ingested."""
    ingested = 0
    with session_scope(ctx.engine) as session:
        rows = repo.open_batches(session, run.id)
        session.expunge_all()
    for row in rows:
        try:
            ingested += _advance(ctx, api, run, row, version)
        except errors.PermanentError as exc:  # this batch cannot go on: its lines go elsewhere
            _give_up(ctx, run, row, str(exc))
        except Exception as exc:  # transient, or a bug: the other rows and the deadline go on
            log.warning(
                "run %s: batch row %s: %s: %s", run.id, row.id, type(exc).__name__, exc, exc_info=True
            )
            _count_failure(ctx, run, row, f"{type(exc).__name__}: {exc}")
    return ingested


def _tick(ctx: Context, api: BatchAPI, run: Run) -> Tick:
    """`tick` for a run on the batch path."""
    run_id = run.id
    outcome = Tick()
    version = prompt_version(run.schema, run.prompt_version)
    outcome.ingested = _advance_rows(ctx, api, run, version)
    # Once begun, the cutover goes on: what it ingests shortens the estimate, which must not
    # send the rest in a new batch.
    now = _now(ctx)
    deadline_due = run.cutover_at is not None or ((cut := cutover_at(ctx, run)) is not None and now >= cut)
    if deadline_due:
        if run.cutover_at is None:  # the plan is made as the cutover begins, before its cancels
            _plan_handover(ctx, run, now, cut=True)
        outcome.dispatch = _cut_over(ctx, api, run, now)
    else:
        sent = submit(ctx, api, run, version)
        outcome.submitted = sent.requests
        with session_scope(ctx.engine) as session:
            left = repo.still_to_send(session, run_id, version, ctx.settings.batch_line_attempts)
            open_rows = repo.open_batches(session, run_id)
        outcome.dispatch = (not left or sent.over_budget) and not open_rows
    if outcome.dispatch and not deadline_due:
        _plan_handover(ctx, run, now, cut=False)
    if outcome.dispatch:
        log.info("run %s: the batch path is done, the rest goes synchronously", run_id)
    return outcome


def _now(ctx: Context) -> datetime:
    """The one clock (the database's), which a deadline's cutover is begun and timed on."""
    with session_scope(ctx.engine) as session:
        return clock.now(session)


ROW_FAILURES_MAX = 5
"""Polls in a row a batch may fail (the provider down, a file that cannot be read) before its
lines go to another batch or synchronously."""


def _count_failure(ctx: Context, run: Run, row: LLMBatch, reason: str) -> None:
    with session_scope(ctx.engine) as session:
        failures = repo.note_failure(session, row.id, reason)
    if failures >= ROW_FAILURES_MAX:
        _give_up(ctx, run, row, f"{failures} polls failed, the last: {reason}")


def _give_up(ctx: Context, run: Run, row: LLMBatch, reason: str) -> None:
    """The batch cannot go on: what it answered and was stored stays, its other lines go in
    another batch (their try counted) or synchronously."""
    log.warning("run %s: batch row %s given up: %s", run.id, row.id, reason)
    with session_scope(ctx.engine) as session:
        repo.update_row(session, row.id, error=reason)
        repo.release(session, row.id)


def dispatched(engine: Engine, run_id: str) -> bool:
    """Record that the run's chord was sent (after sending it: a chord sent twice changes
    nothing, a mark without a chord would leave the run waiting); True the first time."""
    with session_scope(engine) as session:
        return repo.mark_dispatched(session, run_id)


def documents_to_extract(engine: Engine, run_id: str) -> list[int]:
    """The run's documents the synchronous path has to finish, longest first (the stored
    answers make most of them quick)."""
    with session_scope(engine) as session:
        return repo.unfinished_documents(session, run_id)


@dataclass
class BatchCancels:
    """What cancelling a run's open batches did."""

    cancelled: list[str] = field(default_factory=list)
    """The provider's ids of the batches cancelled now."""
    failed: list[str] = field(default_factory=list)
    """Batches the provider could not be asked to cancel: "<id>: <error>"."""
    waiting: bool = False
    """Some batch has not ended yet (still cancelling, or its cancel failed)."""


def cancel_open_batches(engine: Engine, api: BatchAPI, run_id: str, why: str) -> BatchCancels:
    """Cancel what the provider still holds of the run's batches (the lines they completed come
    back all the same, in their output files), and free the chunks of batches not at the
    provider yet. Safe to repeat: a batch cancelling or ended is left as it is."""
    with session_scope(engine) as session:
        rows = repo.open_batches(session, run_id)
        session.expunge_all()
    done = BatchCancels()
    for row in rows:
        if row.status in ("validating", "in_progress", "finalizing") and row.provider_batch_id:
            try:
                state = _cancel_one(api, row.provider_batch_id)
            except errors.PipelineError as exc:
                log.warning("run %s: cancelling batch %s: %s", run_id, row.provider_batch_id, exc)
                done.failed.append(f"{row.provider_batch_id}: {exc}")
                done.waiting = True
                continue
            log.info("run %s: %s: batch %s cancelled (%s)", run_id, why, row.provider_batch_id, state.status)
            with session_scope(engine) as session:
                repo.update_row(session, row.id, status=state.status, stamp=("cancelled_at",), failures=0)
            done.cancelled.append(row.provider_batch_id)
            done.waiting = done.waiting or not state.ended
        elif row.status in repo.WAITING:
            done.waiting = True
        elif row.status in (repo.PREPARING, repo.UPLOADED):
            # Not at the provider yet: its chunks go synchronously (or nowhere, once cancelled).
            with session_scope(engine) as session:
                repo.release(session, row.id)
    return done


def _cancel_one(api: BatchAPI, batch_id: str) -> BatchState:
    """Cancel the batch; one that another process cancelled meanwhile (the run's poll and
    `pipeline cancel` both do) is refused by the provider (409): its state is read instead."""
    try:
        return api.cancel(batch_id)
    except errors.BatchRefused:
        state = api.retrieve(batch_id)
        if state.status != "cancelling" and not state.ended:
            raise
        return state


def _cut_over(ctx: Context, api: BatchAPI, run: Run, now: datetime) -> bool:
    """The deadline needs the synchronous path now: cancel what the provider still holds (its
    completed lines come back all the same) and hand over once the cancels ended, or once
    waiting for them would cost the deadline its margin."""
    waiting = cancel_open_batches(ctx.engine, api, run.id, "deadline").waiting
    with session_scope(ctx.engine) as session:
        started = repo.begin_cutover(session, run.id, now)
    if waiting and (now - started).total_seconds() < ctx.settings.batch_cancel_wait_s:
        return False
    if waiting:
        log.warning("run %s: the cancelled batches did not end in time: going on without them", run.id)
    return True


def _advance(ctx: Context, api: BatchAPI, run: Run, row: LLMBatch, version: str) -> int:
    """Move one batch row on by one step; returns the lines it ingested."""
    if row.status == repo.PREPARING:
        upload_again(ctx, api, row, version, run)
        return 0
    if row.status == repo.UPLOADED:
        create_batch(ctx, api, row, run)
        return 0
    if not row.provider_batch_id:
        return 0
    state = api.retrieve(row.provider_batch_id)
    with session_scope(ctx.engine) as session:
        repo.update_row(
            session,
            row.id,
            status=state.status,
            completed=state.completed,
            failed=state.failed,
            output_file_id=state.output_file_id,
            error_file_id=state.error_file_id,
            error=state.errors,
            stamp=("ended_at",) if state.ended and row.ended_at is None else (),
            **({"failures": 0} if (state.status, state.completed) != (row.status, row.completed) else {}),
        )
    if not state.ended:
        return 0
    if state.token_limit:
        log.info("run %s: batch %s refused on the enqueued-token limit: its lines go again", run.id, state.id)
    ingested = ingest(ctx, api, run, row, state, version)
    with session_scope(ctx.engine) as session:
        held = repo.release(session, row.id)
    log.info("run %s: batch %s %s: %d of its %d lines stored", run.id, state.id, state.status, ingested, held)
    if not ctx.settings.batch_keep_files:
        _delete_files(api, run, [row.input_file_id, state.output_file_id, state.error_file_id])
    return ingested


def _delete_files(api: BatchAPI, run: Run, file_ids: list[str | None]) -> None:
    """Delete an ingested batch's files at the provider, which keeps them (and counts them
    against the organization's storage) until they are. Best effort: a file left behind costs
    storage, not answers."""
    for file_id in filter(None, file_ids):
        try:
            api.delete_file(file_id)
        except errors.PipelineError as exc:
            log.warning("run %s: batch file %s not deleted: %s", run.id, file_id, exc)
