"""What a task makes of a failure: run its step, retry what is transient with backoff, send back
what names a row this worker's database lacks, and record the reason of a failure that ends it.

Shared by the task modules (`extract_tasks`, `report_tasks`, `run_tasks`); decided by the
error's class (`pipeline.core.errors`), the delay by `pipeline.core.retry`.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import NoReturn, TypeVar

import kombu.exceptions
import redis.exceptions
from celery import Task

from pipeline.core.errors import (
    Deferred,
    DeletedFromDatabase,
    LeaseLost,
    PermanentError,
    RetryableError,
    UnknownToDatabase,
)
from pipeline.core.retry import backoff_s, countdown_s
from pipeline.storage import db
from workers.context import worker_context

log = logging.getLogger(__name__)
T = TypeVar("T")

UNKNOWN_REQUEUE_S = 600.0
"""How long a message naming a document or run this worker's database lacks waits to come back
once PIPELINE_TASK_MAX_RETRIES quicker retries are spent. It is never given up on nor
acknowledged as done: a worker with the producer's database (or this one, once its
PIPELINE_DATABASE_URL is fixed) takes it, and the run's chord still counts it."""

DELETED = "deleted"
"""What a task returns for a message naming a document its database deleted (acknowledged)."""

# Every task has max_retries=None: Celery's own limit (3 by default) would end a chord step
# with MaxRetriesExceededError; `retry_or` counts failed attempts itself and gives up with
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


def retry_or(
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
        back_to_queue(task, exc, failed)
    except DeletedFromDatabase as exc:  # the producer's database deleted it: acknowledged
        log.warning("%s %s: %s", task.name, task.request.args, exc)
        return DELETED
    except Deferred as exc:
        kwargs = {**task.request.kwargs, "deferrals": deferrals + 1}
        wait = countdown_s(exc.retry_after_s)
        if due is not None:
            best_effort(due, wait)
        raise task.retry(countdown=wait, kwargs=kwargs, max_retries=None) from None
    except TRANSIENT as exc:
        reason = f"{type(exc).__name__}: {exc}"
        if failed < worker_context().settings.task_max_retries:
            if note is not None:
                best_effort(note, reason)
            log.warning("retrying %s %s: %s", task.name, task.request.args, reason)
            retry_after = exc.retry_after_s if isinstance(exc, RetryableError) else None
            countdown = countdown_s(backoff_s(failed, retry_after))
            if due is not None:
                best_effort(due, countdown)
            raise task.retry(countdown=countdown, max_retries=None) from None
        verdict = f"gave up after {failed + 1} attempts: {reason}"
    except PermanentError as exc:
        verdict = str(exc)
    except Exception as exc:
        log.exception("%s %s failed", task.name, task.request.args)
        verdict = f"internal error: {type(exc).__name__}: {exc}"
    try:
        return give_up(verdict)
    except DeletedFromDatabase as exc:  # deleted while it ran (an answer's write failed on it)
        log.warning("%s %s: %s (after: %s)", task.name, task.request.args, exc, verdict)
        return DELETED
    except TRANSIENT as exc:
        log.warning("could not record the failure of %s %s (%s): retrying", task.name, task.request.args, exc)
        raise task.retry(countdown=countdown_s(backoff_s(failed, None)), max_retries=None) from None


def back_to_queue(task: Task, exc: UnknownToDatabase, failed: int) -> NoReturn:
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


def best_effort(fn: Callable[[T], None], value: T) -> None:
    try:
        fn(value)
    except Exception as exc:  # the database may be what failed
        log.info("could not note a failed attempt: %s", exc)
