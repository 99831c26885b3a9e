"""The models' foundation: the declarative base, column types, statuses and time helpers
(`pipeline.storage.models` re-exports each; import them from there)."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, ClassVar, cast

from sqlalchemy import JSON, BigInteger, DateTime, Integer, Table
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase

JSONType = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments INTEGER PRIMARY KEY; Postgres gets a 64-bit identity.
IdType = BigInteger().with_variant(Integer(), "sqlite")


ERROR_MAX_CHARS = 2000
"""A batch's error, as stored: the provider's list of a file's bad lines can be long."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(moment: datetime) -> datetime:
    """`moment` as UTC: SQLite hands back naive datetimes, and every stored time is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class RunStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    STALLED = "stalled"
    """No progress, and resuming did not help: an operator has to look (`pipeline resume`)."""
    CANCELLED = "cancelled"
    """Stopped on purpose (`pipeline cancel`, or `pipeline run` ended by SIGTERM or Ctrl-C); the
    error says why and what was done, and its report what was extracted. `pipeline retry`
    finishes it."""


class DocStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    EXTRACTED = "extracted"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    """Its run was cancelled before it was extracted (`error` says why)."""


TERMINAL_DOC_STATUSES = (DocStatus.EXTRACTED, DocStatus.FAILED, DocStatus.SKIPPED, DocStatus.CANCELLED)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSONType,
        datetime: DateTime(timezone=True),
    }


def table_of(model: type[Base]) -> Table:
    """The model's table, for Core statements on hot paths (no ORM bookkeeping)."""
    return cast(Table, model.__table__)
