"""Celery's events, redacted before they leave the worker.

Task events (what Flower shows: a task's arguments, its result, the exception and traceback of a
failure or a retry) are published to Redis as the worker sends them; every string field passes
through `pipeline.core.redaction` first, so that neither Flower nor anything else subscribed to
the broker's events sees a secret a provider's error quoted.
"""

from __future__ import annotations

from typing import Any

from celery.app.events import Events
from celery.events.dispatcher import EventDispatcher

from pipeline.core.redaction import redact_data


class RedactingDispatcher(EventDispatcher):
    """Celery's event dispatcher; each event's fields redacted."""

    def send(self, type: str, *args: Any, **fields: Any) -> Any:
        return super().send(type, *args, **{name: redact_data(value) for name, value in fields.items()})


class RedactingEvents(Events):
    """`app.events` with the redacting dispatcher (Celery(events=...))."""

    dispatcher_cls = "workers.events:RedactingDispatcher"
