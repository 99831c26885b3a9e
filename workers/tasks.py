"""Tasks: load by id, call one `pipeline` function, turn errors into a retry or a record.

A header task of the run's chord never raises out of it (Celery would fail the whole
chord): whatever happens, the document ends `extracted` or `failed` with its reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from celery import Task, chord
from sqlalchemy.exc import InterfaceError, OperationalError

from pipeline import extract as extracting
from pipeline import report as reporting
from pipeline.errors import Deferred, PermanentError, RetryableError
from pipeline.retry import backoff_s
from pipeline.storage import repo
from pipeline.storage.db import session_scope
from workers.app import app
from workers.context import worker_context

log = logging.getLogger(__name__)
R = TypeVar("R")

FINALIZE_POLL_S = 5.0
"""How soon finalize looks again when it fires before every document is final."""

# Every task has max_retries=None: Celery's own limit (3 by default) would end a chord step
# with MaxRetriesExceededError; `_retry_or` counts failed attempts itself and gives up with
# a recorded reason instead.
TRANSIENT = (RetryableError, OperationalError, InterfaceError)
"""Worth retrying: the provider or the database is briefly unavailable."""


def _retry_or(task: Task, fn: Callable[[int], R], give_up: Callable[[str], R]) -> R:
    """Run `fn(failed_attempts)`; retry transient failures with backoff, and `give_up` with
    the reason after the last attempt or on a permanent failure.

    A deferral by the global limiter goes back to the queue without counting as a failure.
    """
    deferrals = int(task.request.kwargs.get("deferrals", 0))
    failed = task.request.retries - deferrals
    try:
        return fn(failed)
    except Deferred as exc:
        kwargs = {**task.request.kwargs, "deferrals": deferrals + 1}
        raise task.retry(countdown=exc.retry_after_s, kwargs=kwargs, max_retries=None) from None
    except TRANSIENT as exc:
        reason = f"{type(exc).__name__}: {exc}"
        if failed >= worker_context().settings.task_max_retries:
            return give_up(f"gave up after {failed + 1} attempts: {reason}")
        retry_after = exc.retry_after_s if isinstance(exc, RetryableError) else None
        log.warning("retrying %s %s: %s", task.name, task.request.args, reason)
        raise task.retry(countdown=backoff_s(failed, retry_after), max_retries=None) from None
    except PermanentError as exc:
        return give_up(str(exc))
    except Exception as exc:
        log.exception("%s %s failed", task.name, task.request.args)
        return give_up(f"internal error: {type(exc).__name__}: {exc}")


@app.task(bind=True, name="pipeline.extract", max_retries=None)
def extract(self: Task, document_id: int, deferrals: int = 0) -> str:
    ctx = worker_context()
    status = _retry_or(
        self,
        lambda failed: extracting.extract_document(ctx, document_id, failed),
        lambda reason: extracting.fail(ctx, document_id, reason),
    )
    if status == "extracted":
        _compress_now(document_id)
    return status


def _compress_now(document_id: int) -> None:
    """Compress right after extracting, while other documents are still being extracted:
    the calls fill threads that the end of the extraction phase leaves idle. Best effort:
    whatever is not compressed here, finalize compresses."""
    try:
        reporting.compress_document(worker_context(), document_id)
    except Exception as exc:  # never out of the chord's header; finalize retries it
        log.info("compress of %s left to finalize: %s", document_id, exc)


@app.task(bind=True, name="pipeline.finalize", max_retries=None)
def finalize(self: Task, run_id: str) -> str:
    """Chord body: once every document is final, compress each extraction, then synthesize.

    Completeness is read from the database, not from the chord's results, so an early or
    repeated delivery changes nothing.
    """
    ctx = worker_context()
    with session_scope(ctx.engine) as session:
        if repo.report_exists(session, run_id):
            return "done"
        if repo.unfinished_count(session, run_id):
            raise self.retry(countdown=FINALIZE_POLL_S, max_retries=None)
        document_ids = repo.extracted_ids(session, run_id, without_summary=True)
    if document_ids:
        chord(compress.si(d) for d in document_ids)(synthesize.si(run_id))
    else:
        synthesize.delay(run_id)
    return "reporting"


@app.task(bind=True, name="pipeline.compress", max_retries=None)
def compress(self: Task, document_id: int, deferrals: int = 0) -> str:
    ctx = worker_context()

    def fallback(reason: str) -> str:
        log.warning("compress %s: %s; using the stored fields", document_id, reason)
        return "fallback"

    return _retry_or(self, lambda failed: reporting.compress_document(ctx, document_id, failed), fallback)


@app.task(bind=True, name="pipeline.synthesize", max_retries=None)
def synthesize(self: Task, run_id: str, deferrals: int = 0) -> str:
    ctx = worker_context()

    def without_answer(reason: str) -> str:
        answer = f"(The synthesis failed: {reason}. The per-filing table below is complete.)"
        return str(reporting.synthesize_run(ctx, run_id, answer=answer))

    return _retry_or(
        self,
        lambda failed: str(reporting.synthesize_run(ctx, run_id, failed_attempts=failed)),
        without_answer,
    )
