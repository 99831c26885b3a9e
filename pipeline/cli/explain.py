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


def _database(exc: Exception, settings: Settings | None) -> Explained:
    where = database_label(settings.resolved_database_url) if settings else "the database"
    reason = _reason(db.driver_error(exc))
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
