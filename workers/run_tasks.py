"""A run's own tasks: finalize (the chord's body, which sends the report's steps once every
document is final) and a batch run's poll of its provider batches (`batch_tick`).
"""

from __future__ import annotations

import logging
import uuid

from celery import Task, chord

from pipeline.context import Context
from pipeline.core.errors import DeletedFromDatabase, PermanentError, UnknownToDatabase
from pipeline.core.logs import log_context
from pipeline.recovery.heartbeat import batch_chain
from pipeline.recovery.steps import StepLease, once_per_lease, step_held
from pipeline.runs import batching, tiers
from pipeline.runs import finalize as finalizing
from workers.app import app
from workers.context import redis_client, worker_context
from workers.report_tasks import compress, synthesize
from workers.task_retry import DELETED, TRANSIENT, back_to_queue

log = logging.getLogger(__name__)

FINALIZE_POLL_S = 5.0
"""How soon finalize looks again when it fires before every document is final."""
POLLER_TTL_S = 6 * FINALIZE_POLL_S
"""How long the run's poller keeps its place without polling (a missed poll or two, a busy
worker); then another finalize may take it."""
BATCH_CHAIN_TTL_S = 7 * 24 * 3600
"""A chain's id outlives any batch (24 h window) and any pause of the workers."""


@app.task(bind=True, name="pipeline.finalize", max_retries=None)
def finalize(self: Task, run_id: str, document_id: int | None = None) -> str:
    """Chord body: once every document is final, compress each extraction, then synthesize.

    Completeness is read from the database, not from the chord's results, so an early or
    repeated delivery changes nothing. `document_id`, one of the run's, tells a run deleted
    since (the message ends, said once) from one this worker's database never had (it goes
    back to the queue).
    """
    with log_context(run_id=run_id, task_id=self.request.id, task_name=self.name):
        return _finalize(self, run_id, document_id)


def _finalize(self: Task, run_id: str, document_id: int | None) -> str:
    ctx = worker_context()
    try:
        step = finalizing.next_step(ctx.engine, run_id, document_id)
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
        tiers.record_document_tiers(ctx.engine, run_id)
        if step.compress_ids:
            chord(compress.si(d) for d in step.compress_ids)(synthesize.si(run_id))
        else:
            synthesize.delay(run_id)
    except UnknownToDatabase as exc:  # raised before the report lock is asked for
        back_to_queue(self, exc, self.request.retries)
    except DeletedFromDatabase as exc:  # `prune --all` deleted the run: nothing to wait for
        log.warning("%s %s: %s", self.name, self.request.args, exc)
        return DELETED
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
            batch_chain(run_id),
            token=chain or uuid.uuid4().hex,
            ttl_s=BATCH_CHAIN_TTL_S,
        )
        # Whether the run's chain ran in this deployment before (else its batches may be another
        # endpoint's: the tick asks its endpoint first).
        chain_here = chain is not None or step_held(client, batch_chain(run_id))
        if chain is None:
            link.take_over()
        elif not link.take():
            return "superseded"
        with StepLease(client, ctx.leases, f"batch:{run_id}") as step:
            if not step.taken:
                outcome = batching.Tick()  # another tick of this run is still at it
            else:
                try:
                    outcome = batching.tick(ctx, run_id, chain_here)
                except Exception as exc:  # the provider or the database: the next tick tries again
                    expected = isinstance(exc, (*TRANSIENT, PermanentError))
                    log.warning(
                        "batch poll of run %s: %s: %s", run_id, type(exc).__name__, exc, exc_info=not expected
                    )
                    outcome = batching.Tick()
        if outcome.elsewhere:
            link.release()  # this deployment does not poll the run: no claim on it left here
            return "elsewhere"
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
