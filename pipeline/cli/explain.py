"""What the CLI says when a command fails on something outside it: one sentence naming the
server or the setting and the fix, and an exit code (pipeline/core/exits.py), instead of a
traceback. `pipeline --debug …` shows the traceback instead.

The failures come from libraries (SQLAlchemy, redis-py, kombu), so they are told apart by class;
kombu's by name, since `pipeline` imports no Celery outside `cli.celery_app`.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import redis.exceptions

from pipeline.core import exits
from pipeline.core.errors import ConfigError, InputError, database_label
from pipeline.core.redaction import redact
from pipeline.core.settings import Settings
from pipeline.storage import db
from pipeline.storage.connections import POOLER_REFUSED_OPTIONS

MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class Explained:
    message: str
    code: int


def redis_label(url: str | None) -> str:
    """A Redis URL as host:port/db, without the password."""
    if not url:
        return "the embedded Redis"
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix socket {parts.path}"
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}{parts.path or '/0'}"


def explain(exc: BaseException, settings: Settings | None) -> Explained:
    """The sentence and exit code for `exc`, raised out of a command."""
    if isinstance(exc, (ConfigError, InputError)):
        return Explained(str(exc), exits.USAGE)
    if isinstance(exc, db.UNREACHABLE):
        return _database(exc, settings)
    if isinstance(exc, redis.exceptions.AuthenticationError) or _redis_auth(exc):
        url = settings.redis_url if settings else None
        return Explained(
            f"the broker (Redis) at {redis_label(url)} refused the password in PIPELINE_REDIS_URL: "
            "put the server's password in the URL (redis://:password@host:6379/0)",
            exits.USAGE,
        )
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)) or (
        type(exc).__module__.startswith("kombu") and type(exc).__name__ == "OperationalError"
    ):
        url = settings.redis_url if settings else None
        return Explained(
            f"the broker (Redis) at {redis_label(url)} did not answer ({_reason(exc)}): start it, "
            "or point PIPELINE_REDIS_URL at a running one",
            exits.UNREACHABLE,
        )
    if isinstance(exc, OSError) and exc.filename:
        return Explained(f"{exc.filename}: {exc.strerror or exc}", exits.USAGE)
    said = redact(_reason(exc), settings)  # an error's words may quote anything
    return Explained(
        f"internal error: {type(exc).__name__}: {said} "
        "(run it again as `pipeline --debug …` for the traceback, and report it)",
        exits.INTERNAL,
    )


FULL = (
    "too many clients already",
    "remaining connection slots are reserved",
    "too many connections for",  # a role's or a database's CONNECTION LIMIT
)
"""How Postgres says it has no connection slot left (SQLSTATE 53300): it answered, and is full."""
NOT_YET = ("the database system is starting up", "the database system is shutting down")
"""It answered, and takes no connection for now (57P03)."""


def _database(exc: Exception, settings: Settings | None) -> Explained:
    where = database_label(settings.resolved_database_url) if settings else "the database"
    reason = _reason(db.driver_error(exc))
    # Matched in every line: libpq names each address it tried (localhost: ::1, then 127.0.0.1).
    lines = [" ".join(line.split()) for line in str(db.driver_error(exc)).splitlines()]
    if full := next((line for line in lines if any(words in line for words in FULL)), None):
        # Before FATAL below: a full server is not a wrong user, password or database name.
        return Explained(
            f"the database {where} is full: it has no connection free ({full[-MAX_REASON_CHARS:]}); "
            "try again once other clients have closed theirs, or raise its max_connections (or "
            "the role's or database's CONNECTION LIMIT)",
            exits.UNREACHABLE,
        )
    if any(POOLER_REFUSED_OPTIONS in line for line in lines):
        return Explained(
            f"the database {where} is reached through a pooler (PgBouncer) that refuses session "
            "options: set PIPELINE_DB_TRANSACTION_POOLER=true (docs/operations.md, PgBouncer)",
            exits.USAGE,
        )
    if starting := next((line for line in lines if any(words in line for words in NOT_YET)), None):
        return Explained(
            f"the database {where} takes no connection yet ({starting[-MAX_REASON_CHARS:]}): "
            "try again in a moment",
            exits.UNREACHABLE,
        )
    if "FATAL" in reason or "no password supplied" in reason:  # it answered, and said no
        return Explained(
            f"the database {where} refused the connection ({' '.join(reason.split())}): "
            "fix the user, password or database name in PIPELINE_DATABASE_URL",
            exits.USAGE,
        )
    return Explained(
        f"the database {where} did not answer ({reason}): start it, or point "
        "PIPELINE_DATABASE_URL at a running one",
        exits.UNREACHABLE,
    )


def _redis_auth(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, redis.exceptions.ResponseError) and text.startswith(("NOAUTH", "WRONGPASS"))


def _reason(exc: BaseException) -> str:
    """The first line of the error's own words, short (no password is in these: hosts and
    ports only, and URLs pass through `redis_label`/`database_label` before they are shown)."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:MAX_REASON_CHARS]
