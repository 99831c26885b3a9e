"""Log records that say which run and document they are about; JSON lines on request.

Tasks set the ids with `log_context(run_id=…, document_id=…)`; every record logged inside
carries them (as attributes, so any formatter can use them). `PIPELINE_LOG_FORMAT=json`
writes one JSON object per line for log collectors; the default text format appends the ids.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

CONTEXT_FIELDS = ("run_id", "document_id", "task_id", "task_name")

_context: ContextVar[dict[str, Any]] = ContextVar("pipeline_log_context", default={})  # noqa: B039


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Within the block, every log record carries `fields` (None values are left out)."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def bind(**fields: Any) -> None:
    """Add ids to the current context until the enclosing `log_context` ends."""
    _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})


class ContextFilter(logging.Filter):
    """Copies the current context's ids onto each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _ids(record: logging.LogRecord) -> dict[str, Any]:
    return {key: getattr(record, key) for key in CONTEXT_FIELDS if getattr(record, key, None) is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, ids, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_ids(record),
        }
        if record.exc_text:  # the traceback as redaction left it (`pipeline.core.redaction`)
            entry["exception"] = record.exc_text
        elif record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextWithIds(logging.Formatter):
    """Another formatter's text, with the record's ids appended."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        text = self.inner.format(record)
        ids = {k: v for k, v in _ids(record).items() if k in ("run_id", "document_id")}
        if not ids:
            return text
        return f"{text} [{' '.join(f'{k}={v}' for k, v in ids.items())}]"


def install(logger: logging.Logger, fmt: str) -> None:
    """Give every handler of `logger` the context filter and the chosen format."""
    for handler in logger.handlers:
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
        if fmt == "json":
            handler.setFormatter(JsonFormatter())
        elif not isinstance(handler.formatter, TextWithIds):
            handler.setFormatter(TextWithIds(handler.formatter))
