"""Tasks: load by id, call one `pipeline` function, turn errors into a retry or a record.

A header task of the run's chord never raises out of it (Celery would fail the whole
chord): whatever happens, the document ends `extracted` or `failed` with its reason.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable
from typing import NoReturn, TypeVar

import kombu.exceptions
import redis.exceptions
from celery import Task, chord

from pipeline.context import Context, deadline_of
from pipeline.core.errors import (
    Deferred,
    InputError,
    LeaseLost,
    PermanentError,
    RetryableError,
    UnknownToDatabase,
)
from pipeline.core.logs import log_context
from pipeline.core.retry import backoff_s, countdown_s
from pipeline.extraction import extract as extracting
from pipeline.extraction.extract import CustomResult
from pipeline.extraction.grounding import GroundedExtraction
from pipeline.llm.circuit import run_deadline
from pipeline.llm.client import CallRecord
from pipeline.recovery.steps import StepLease, once_per_lease, step_held
from pipeline.reporting import compress as compressing
from pipeline.reporting import streaming
from pipeline.reporting import synthesize as reporting
from pipeline.runs import batching
from pipeline.runs import finalize as finalizing
from pipeline.storage import db
from workers.app import app
from workers.context import redis_client, worker_context

log = logging.getLogger(__name__)
T = TypeVar("T")

FINALIZE_POLL_S = 5.0
"""How soon finalize looks again when it fires before every document is final."""
POLLER_TTL_S = 6 * FINALIZE_POLL_S
"""How long the run's poller keeps its place without polling (a missed poll or two, a busy
worker); then another finalize may take it."""
STEP_BUSY_POLL_S = 1.0
"""How soon a compress whose step another worker holds looks again."""

UNKNOWN_REQUEUE_S = 600.0
"""How long a message naming a document or run this worker's database lacks waits to come back
once PIPELINE_TASK_MAX_RETRIES quicker retries are spent. It is never given up on nor
acknowledged as done: a worker with the producer's database (or this one, once its
PIPELINE_DATABASE_URL is fixed) takes it, and the run's chord still counts it."""

# Every task has max_retries=None: Celery's own limit (3 by default) would end a chord step
# with MaxRetriesExceededError; `_retry_or` counts failed attempts itself and gives up with
# a recorded reason instead.
TRANSIENT: tuple[type[BaseException], ...] = (
    RetryableError,
    *db.UNREACHABLE,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    kombu.exceptions.OperationalError,
)
"""Worth retrying: the provider, the database or Redis is briefly unavailable, or every pooled
database connection was busy for the pool's timeout."""


def _retry_or(
    task: Task,
    fn: Callable[[int], str],
    give_up: Callable[[str], str],
    note: Callable[[str], None] | None = None,
    due: Callable[[float], None] | None = None,
) -> str:
    """Run `fn(failed_attempts)`; retry transient failures with backoff (telling `note` why,
    and `due` the retry's countdown), and `give_up` with the reason after the last attempt or
    on a permanent failure.

    A deferral (limiter, time budget) goes back to the queue without counting as a failure.
    When recording the failure itself fails for a transient reason (the database is down),
    the task is retried rather than raised out of the chord.
    """
    deferrals = int(task.request.kwargs.get("deferrals", 0))
    failed = task.request.retries - deferrals
    try:
        return fn(failed)
    except LeaseLost as exc:
        log.warning("%s %s: %s; its new holder carries on", task.name, task.request.args, exc)
        return "superseded"
    except UnknownToDatabase as exc:  # before TRANSIENT: never given up on, nothing to record
        _back_to_queue(task, exc, failed)
    except Deferred as exc:
        kwargs = {**task.request.kwargs, "deferrals": deferrals + 1}
        wait = countdown_s(exc.retry_after_s)
        if due is not None:
            _best_effort(due, wait)
        raise task.retry(countdown=wait, kwargs=kwargs, max_retries=None) from None
    except TRANSIENT as exc:
        reason = f"{type(exc).__name__}: {exc}"
        if failed < worker_context().settings.task_max_retries:
            if note is not None:
                _best_effort(note, reason)
            log.warning("retrying %s %s: %s", task.name, task.request.args, reason)
            retry_after = exc.retry_after_s if isinstance(exc, RetryableError) else None
            countdown = countdown_s(backoff_s(failed, retry_after))
            if due is not None:
                _best_effort(due, countdown)
            raise task.retry(countdown=countdown, max_retries=None) from None
        verdict = f"gave up after {failed + 1} attempts: {reason}"
    except PermanentError as exc:
        verdict = str(exc)
    except Exception as exc:
        log.exception("%s %s failed", task.name, task.request.args)
        verdict = f"internal error: {type(exc).__name__}: {exc}"
    try:
        return give_up(verdict)
    except TRANSIENT as exc:
        log.warning("could not record the failure of %s %s (%s): retrying", task.name, task.request.args, exc)
        raise task.retry(countdown=countdown_s(backoff_s(failed, None)), max_retries=None) from None


def _back_to_queue(task: Task, exc: UnknownToDatabase, failed: int) -> NoReturn:
    """Send the message back to the queue, loudly: the worker's database does not know what it
    names (most likely another database than the producer's). Backoff for the first
    PIPELINE_TASK_MAX_RETRIES attempts, then UNKNOWN_REQUEUE_S; never acknowledged as done."""
    spent = failed >= worker_context().settings.task_max_retries
    countdown = countdown_s(UNKNOWN_REQUEUE_S if spent else backoff_s(failed, None))
    log.error(
        "%s %s on %s back to the queue in %.0f s (attempt %d), not acknowledged as done: %s",
        task.name,
        task.request.args,
        socket.gethostname(),
        countdown,
        task.request.retries + 1,
        exc,
    )
    raise task.retry(countdown=countdown, max_retries=None) from None


def _best_effort(fn: Callable[[T], None], value: T) -> None:
    try:
        fn(value)
    except Exception as exc:  # the database may be what failed
        log.info("could not note a failed attempt: %s", exc)


@app.task(bind=True, name="pipeline.extract", max_retries=None)
def extract(self: Task, document_id: int, deferrals: int = 0) -> str:
    with log_context(document_id=document_id, task_id=self.request.id, task_name=self.name):
        return _extract(self, document_id)


def _extract(self: Task, document_id: int) -> str:
    ctx, attempt = worker_context(), extracting.Attempt()
    status = _retry_or(  # then its delivery is handled (workers.heartbeat, at task_postrun)
        self,
        lambda failed: extracting.extract_document(
            ctx, document_id, failed, summarize=_summarize, attempt=attempt
        ),
        lambda reason: _fail(ctx, document_id, reason, attempt),
        lambda reason: extracting.note_retry(ctx, document_id, reason),
        lambda countdown: extracting.retry_due(ctx, document_id, countdown),
    )
    if status == "extracted":
        _claim_partial(document_id)
    if status in ("extracted", "failed") and self.request.chord is None:
        _finalize_if_last(document_id)  # sent early or again: the chord's finalize only polls
    return status


def _fail(ctx: Context, document_id: int, reason: str, attempt: extracting.Attempt) -> str:
    log.warning("document %s failed: %s", document_id, reason)
    return extracting.fail(ctx, document_id, reason, attempt)


def _summarize(
    query: str, result: GroundedExtraction | CustomResult, sink: Callable[[CallRecord], None]
) -> str | None:
    """Compress right after extracting, from the grounded result in memory (the document's one
    closing write stores the summary with it), while other documents are still being
    extracted: the calls fill threads that the end of the extraction phase leaves idle. Best
    effort: what is not compressed here, finalize compresses."""
    try:
        return compressing.summarize(worker_context(), query, result, sink)
    except Exception as exc:  # never out of the chord's header; finalize retries it
        log.info("summary left to finalize: %s", exc)
        return None


def _finalize_if_last(document_id: int) -> None:
    try:
        run_id = finalizing.ready_to_report(worker_context().engine, document_id)
        if run_id is not None:
            finalize.delay(run_id)
    except Exception as exc:  # never out of the chord's header; the chord's finalize polls
        log.info("finalize after %s left to the chord's: %s", document_id, exc)


def _claim_partial(document_id: int) -> None:
    """Best effort, once the document is extracted: claim a partial synthesis of its run when
    enough summaries wait for one, and send it. What no partial takes, the final synthesis
    reads itself."""
    ctx = worker_context()
    try:
        partial_id = streaming.claim_ready(ctx, document_id)
    except Exception as exc:  # never out of the chord's header
        log.info("partial synthesis after %s left to the final synthesis: %s", document_id, exc)
        return
    if partial_id is None:
        return
    try:
        synthesize_partial.delay(partial_id)
    except Exception as exc:  # the broker: give the summaries back rather than leave them waited for
        log.info("partial synthesis %s not sent (%s): its summaries go back", partial_id, exc)
        _best_effort(lambda pid: streaming.give_back(ctx, pid), partial_id)


@app.task(name="pipeline.synthesize_partial", ignore_result=True)
def synthesize_partial(partial_id: int) -> str:
    """A partial synthesis of a run's summaries; a failure gives them back, not retried."""
    ctx = worker_context()
    # The step lease tells the run's final synthesis that a live worker answers the partial:
    # one whose worker died is not waited for.
    with (
        log_context(partial_id=partial_id, task_name="pipeline.synthesize_partial"),
        StepLease(redis_client(), ctx.leases, f"partial:{partial_id}") as step,
    ):
        if not step.taken:
            return "answered elsewhere"
        try:
            return streaming.synthesize_partial(ctx, partial_id)
        except Exception as exc:
            log.info("partial synthesis %s left to the final synthesis: %s", partial_id, exc)
            return "given back"


@app.task(bind=True, name="pipeline.finalize", max_retries=None)
def finalize(self: Task, run_id: str) -> str:
    """Chord body: once every document is final, compress each extraction, then synthesize.

    Completeness is read from the database, not from the chord's results, so an early or
    repeated delivery changes nothing.
    """
    with log_context(run_id=run_id, task_id=self.request.id, task_name=self.name):
        return _finalize(self, run_id)


def _finalize(self: Task, run_id: str) -> str:
    ctx = worker_context()
    try:
        step = finalizing.next_step(ctx.engine, run_id)
        if step.action == "wait":
            if not _sole_poller(ctx, run_id, str(self.request.id)):
                return "another finalize waits for the run"
            raise self.retry(countdown=FINALIZE_POLL_S, max_retries=None)
        if step.action != "report":
            return step.action
        # Within a lease, one finalize of a run sends its report steps (reclaims, resumes and the
        # stranded-run finisher send finalizes of their own); each step has a lease of its own,
        # and a compress that gave up stored its fallback: one sent again pays for nothing.
        if not once_per_lease(redis_client(), ctx.leases, f"report:{run_id}"):
            return "reporting elsewhere"  # a reclaim's or a resume's finalize got there first
        if step.compress_ids:
            chord(compress.si(d) for d in step.compress_ids)(synthesize.si(run_id))
        else:
            synthesize.delay(run_id)
    except UnknownToDatabase as exc:  # raised before the report lock is asked for
        _back_to_queue(self, exc, self.request.retries)
    except TRANSIENT as exc:
        log.warning("finalize %s: %s; retrying", run_id, exc)
        raise self.retry(countdown=FINALIZE_POLL_S, max_retries=None) from None
    return "reporting"


def _sole_poller(ctx: Context, run_id: str, task_id: str) -> bool:
    """Whether this finalize task is the run's one poller (taking the place when it is free).
    Every reclaim and resume sends a finalize of its own; without this, each kept polling every
    few seconds until the run ended. A poller that dies frees its place after POLLER_TTL_S; a
    run whose documents end meanwhile is finalized by the heartbeats (`finish_stranded`)."""
    poller = StepLease(
        redis_client(), ctx.leases, f"finalize-poller:{run_id}", token=task_id, ttl_s=POLLER_TTL_S
    )
    return poller.take()


@app.task(bind=True, name="pipeline.compress", max_retries=None)
def compress(self: Task, document_id: int, deferrals: int = 0) -> str:
    with log_context(document_id=document_id, task_id=self.request.id, task_name=self.name):
        return _compress(self, document_id)


def _compress(self: Task, document_id: int) -> str:
    ctx = worker_context()

    def fallback(reason: str) -> str:
        """Stored, so that a finalize sent again (a reclaim's, a resume's) pays for nothing."""
        log.warning("compress %s: %s; using the stored fields", document_id, reason)
        try:
            compressing.compress_document(ctx, document_id, guard=step.check, without_llm=True)
        except LeaseLost as exc:  # never out of the chord's header
            log.warning("compress %s: %s", document_id, exc)
            return "superseded"
        return "fallback"

    with StepLease(redis_client(), ctx.leases, f"compress:{document_id}") as step:
        if not step.taken:  # another finalize's compress is on it: come back to find it done
            raise self.retry(countdown=STEP_BUSY_POLL_S, max_retries=None)
        return _retry_or(
            self,
            lambda failed: compressing.compress_document(ctx, document_id, failed, guard=step.check),
            fallback,
        )


@app.task(bind=True, name="pipeline.synthesize", max_retries=None, ignore_result=True)
def synthesize(self: Task, run_id: str, deferrals: int = 0) -> str:
    with log_context(run_id=run_id, task_id=self.request.id, task_name=self.name):
        return _synthesize(self, run_id)


def _synthesize(self: Task, run_id: str) -> str:
    ctx, client = worker_context(), redis_client()

    def answering(partial_id: int) -> bool:
        return step_held(client, f"partial:{partial_id}")

    with StepLease(client, ctx.leases, f"synthesize:{run_id}") as step:
        if not step.taken:
            return "reporting elsewhere"  # a live synthesis of the run holds the step
        try:
            if finalizing.next_step(ctx.engine, run_id).action == "done":
                return "done"
        except UnknownToDatabase as exc:
            _back_to_queue(self, exc, self.request.retries)
        # An outage holds the synthesis's calls (deferred, no retry spent) until the run's
        # deadline, when PIPELINE_OUTAGE_TOLERANCE_S is unset: then the report goes without it.
        with run_deadline(deadline_of(ctx, run_id)):
            return _retry_or(
                self,
                lambda failed: str(
                    reporting.synthesize_run(
                        ctx, run_id, failed_attempts=failed, guard=step.check, answering=answering
                    )
                ),
                lambda reason: str(
                    reporting.synthesize_without_answer(ctx, run_id, reason, guard=step.check)
                ),
            )


@app.task(name="pipeline.batch_tick", ignore_result=True)
def batch_tick(run_id: str, chain: str | None = None) -> str:
    """A batch run's poll: its batches advanced, ingested and submitted (`batching.tick`), then
    itself again after PIPELINE_BATCH_POLL_S, until the run goes to the synchronous path. One
    tick at a time per run (a step lease). A tick sent without `chain` (the first, a restart by
    the heartbeat, a resume) starts a new chain, and a tick of an older chain ends without
    sending itself again: chains never multiply."""
    with log_context(run_id=run_id, task_name="pipeline.batch_tick"):
        ctx = worker_context()
        client = redis_client()
        link = StepLease(
            client,
            ctx.leases,
            f"batch-chain:{run_id}",
            token=chain or uuid.uuid4().hex,
            ttl_s=BATCH_CHAIN_TTL_S,
        )
        if chain is None:
            link.take_over()
        elif not link.take():
            return "superseded"
        with StepLease(client, ctx.leases, f"batch:{run_id}") as step:
            if not step.taken:
                outcome = batching.Tick()  # another tick of this run is still at it
            else:
                try:
                    outcome = batching.tick(ctx, run_id)
                except Exception as exc:  # the provider or the database: the next tick tries again
                    expected = isinstance(exc, (*TRANSIENT, PermanentError))
                    log.warning(
                        "batch poll of run %s: %s: %s", run_id, type(exc).__name__, exc, exc_info=not expected
                    )
                    outcome = batching.Tick()
        if outcome.dispatch:
            try:
                from workers.canvas import enqueue_run

                # The chord first, then the mark: a chord sent twice changes nothing (leases,
                # idempotent writes), a mark without a chord would leave the run waiting.
                enqueue_run(run_id, batching.documents_to_extract(ctx.engine, run_id))
                batching.dispatched(ctx.engine, run_id)
                link.release()
                return "dispatched"
            except Exception as exc:
                log.warning("run %s: handing over to the synchronous path failed (%s): again", run_id, exc)
        if outcome.done:
            return "done"
        batch_tick.apply_async((run_id, link.token), countdown=ctx.settings.batch_poll_s)
        return f"{outcome.submitted} sent, {outcome.ingested} ingested"


BATCH_CHAIN_TTL_S = 7 * 24 * 3600
"""A chain's id outlives any batch (24 h window) and any pause of the workers."""


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
def nightly(inbox: str | None = None) -> str:
    """Periodic (beat, PIPELINE_INBOX_SCHEDULE): submit the inbox's new content as a run; the
    run's id, or what happened in words.

    `inbox` is beat's PIPELINE_INBOX (the worker's own when beat sent none). The task runs on a
    worker, so the path must be readable there (a shared volume or directory): when it is not,
    the worker says so at ERROR, naming the path, its host and the fix, and so does the result."""
    from pipeline.runs.inbox import inbox_problem
    from pipeline.runs.nightly import prepare_nightly
    from workers.canvas import enqueue_early, start_run

    ctx = worker_context()
    path = inbox or ctx.settings.inbox
    host = socket.gethostname()
    problem = inbox_problem(path, host)
    plan = None
    if problem is None:
        early = enqueue_early if ctx.settings.llm_mode == "sync" else None
        try:
            plan = prepare_nightly(
                ctx.engine, ctx.settings.model_copy(update={"inbox": path}), on_early=early
            )
        except InputError as exc:
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
        start_run(ctx.engine, ctx.settings, plan)
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
