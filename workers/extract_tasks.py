"""The extract task: one document extracted (its summary written with it when it can be), then
what its end allows sent: a partial synthesis of its run, the run's finalize.

A header task of the run's chord never raises out of it (Celery would fail the whole
chord): whatever happens, the document ends `extracted` or `failed` with its reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from celery import Task

from pipeline.context import Context
from pipeline.core.logs import log_context
from pipeline.extraction import extract as extracting
from pipeline.extraction.extract import CustomResult
from pipeline.extraction.grounding import GroundedExtraction
from pipeline.llm.client import CallRecord
from pipeline.reporting import compress as compressing
from pipeline.reporting import streaming
from pipeline.runs import finalize as finalizing
from workers.app import app
from workers.context import worker_context
from workers.report_tasks import synthesize_partial
from workers.run_tasks import finalize
from workers.task_retry import best_effort, retry_or

log = logging.getLogger(__name__)


@app.task(bind=True, name="pipeline.extract", max_retries=None)
def extract(self: Task, document_id: int, deferrals: int = 0) -> str:
    with log_context(document_id=document_id, task_id=self.request.id, task_name=self.name):
        return _extract(self, document_id)


def _extract(self: Task, document_id: int) -> str:
    ctx, attempt = worker_context(), extracting.Attempt()
    status = retry_or(  # then its delivery is handled (workers.heartbeat, at task_postrun)
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
            finalize.delay(run_id, document_id)
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
        best_effort(lambda pid: streaming.give_back(ctx, pid), partial_id)
