"""The Redis result backend, without the sender's subscriptions, and without secrets.

Celery's Redis backend subscribes the sending process to the result channel of every
task it sends (and group members' barriers), in case it waits on the result. Nothing here waits on a Celery result
(progress and completeness are read from the database), so a 10,000-document submit
would make 10,000 useless SUBSCRIBEs and leave them to be torn down at exit.

What it stores (a task's result, the exception and traceback of a failure or a retry) passes
through `pipeline.core.redaction` first.
"""

from __future__ import annotations

from typing import Any

from celery.backends.redis import RedisBackend

from pipeline.core.redaction import redact, redact_data


class SendOnlyRedisBackend(RedisBackend):
    """Stores results and counts chord parts as usual, redacted; never subscribes to them."""

    def store_result(
        self,
        task_id: str,
        result: Any,
        state: str,
        traceback: str | None = None,
        request: Any = None,
        **kwargs: Any,
    ) -> Any:
        if not isinstance(result, BaseException):  # an exception's words: prepare_exception
            result = redact_data(result)
        return super().store_result(
            task_id, result, state, redact(traceback) if traceback else traceback, request, **kwargs
        )

    def prepare_exception(self, exc: BaseException, serializer: str | None = None) -> Any:
        return redact_data(super().prepare_exception(exc, serializer))

    def on_task_call(self, producer: Any, task_id: str) -> None:
        return None

    def add_pending_result(self, result: Any, weak: bool = False, start_drainer: bool = True) -> Any:
        return result

    def remove_pending_result(self, result: Any) -> Any:
        return result


def backend_url(redis_url: str) -> str:
    """The `result_backend` setting naming this class for `redis_url`."""
    return f"workers.backend:SendOnlyRedisBackend+{redis_url}"
