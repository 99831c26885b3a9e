"""The report's tasks: an extracted document compressed to its summary, a partial synthesis of
a run's summaries as they come, and the run's synthesis, which writes its report. Each holds
a step lease of its own (`StepLease`): one sent twice, or by another finalize, pays once.
"""

from __future__ import annotations

import logging

from celery import Task

from pipeline.context import deadline_of
from pipeline.core.errors import LeaseLost, UnknownToDatabase
from pipeline.core.logs import log_context
from pipeline.llm.circuit import run_deadline
from pipeline.recovery.steps import StepLease, step_held
from pipeline.reporting import compress as compressing
from pipeline.reporting import streaming
from pipeline.reporting import synthesize as reporting
from pipeline.runs import finalize as finalizing
from workers.app import app
from workers.context import redis_client, worker_context
from workers.task_retry import back_to_queue, retry_or

log = logging.getLogger(__name__)

STEP_BUSY_POLL_S = 1.0
"""How soon a compress whose step another worker holds looks again."""


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
        return retry_or(
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
            back_to_queue(self, exc, self.request.retries)
        # An outage holds the synthesis's calls (deferred, no retry spent) until the run's
        # deadline, when PIPELINE_OUTAGE_TOLERANCE_S is unset: then the report goes without it.
        with run_deadline(deadline_of(ctx, run_id)):
            return retry_or(
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
