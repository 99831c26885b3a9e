"""Engines, sessions and schema migrations."""

from __future__ import annotations

import fcntl
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from pipeline.core.settings import get_settings
from pipeline.storage.connections import BudgetPool, session_free_connect_args

UNREACHABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, PoolTimeout)
"""The database could not be reached, a connection was lost, or every pooled connection stayed
busy for the pool's timeout: a later try may succeed."""

REFUSED: type[Exception] = DBAPIError
"""The database (its driver) raised: a statement it refused (a NUL in text, a value too long),
or one of UNREACHABLE."""


def driver_error(exc: BaseException) -> BaseException:
    """The driver's own error under SQLAlchemy's wrapper (its words name the reason), else exc."""
    return exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc


SQLITE_BUSY_TIMEOUT_MS = 60_000
"""Several worker processes share one SQLite file in embedded mode: wait for the writer."""

_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


IDLE_IN_TRANSACTION_TIMEOUT_MS = 30_000
"""Postgres ends a session idle inside a transaction this long (its locks go with it)."""

CONNECT_TIMEOUT_S = 5
"""Connecting to Postgres (TCP, TLS, authentication) gives up after this long: a server that
accepts and never answers is an error, retried as any outage, not a thread waiting for good."""
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_COUNT = 10, 5, 3
"""TCP keepalive: a connection whose server went silent (a failover, a NAT or firewall that
dropped it) is found dead 10 + 3 x 5 = 25 s after its last packet, while a statement waits."""
TCP_USER_TIMEOUT_MS = 30_000
"""A statement sent and never acknowledged (the peer gone mid-write) fails after this long;
keepalive only probes an idle connection."""
STATEMENT_TIMEOUT_MS = 300_000
"""The server ends a statement running this long: none of ours comes near it (the longest, a
report's reads, take seconds; a lock wait ends with the idle-in-transaction timeout of the
session holding it), so it bounds only a statement stuck for good. Migrations have none."""
MAX_IDS_PER_STATEMENT = 1000
"""An `IN` list is cut into statements of at most this many ids: Postgres takes 65,535 bound
parameters in one, and a received set can grow past that (a prefork worker's, say)."""

POOL_RECYCLE_S = 1800
"""A pooled Postgres connection older than this is replaced at its next checkout, before a
firewall's or a server's idle cut (commonly an hour or more) finds it."""

_ping_before_checkout = True


def ping_before_checkout(enabled: bool) -> None:
    """Whether the Postgres engines this process makes from now on test each pooled connection
    before handing it out (a round trip per transaction). Worker processes turn it off
    (`pipeline worker`): a connection the server dropped then fails its first statement, as a
    disconnect, which the pool answers by discarding it and every connection made before it,
    and the task retries (workers/task_retry.py). Processes with no such retry (the CLI's waits,
    `pipeline status`) keep the ping, which replaces a dropped connection unseen."""
    global _ping_before_checkout
    _ping_before_checkout = enabled


def get_engine(url: str, pool_size: int | None = None) -> Engine:
    """One engine per URL per process. Its Postgres pool holds at most `pool_size` connections
    (default PIPELINE_DB_POOL_SIZE, the process's budget, whatever its thread count), opened as
    needed; a thread finding them all busy waits PIPELINE_DB_POOL_TIMEOUT_S, then fails with a
    TimeoutError naming the budget. Asked for a larger pool than the cached engine has, it is
    replaced by one that large."""
    if pool_size is None:
        pool_size = get_settings().db_pool_size
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None or _pool_size(engine) < pool_size:
            engine = _create_engine(url, pool_size)
            _engines[url] = engine
        return engine


def _pool_size(engine: Engine) -> int:
    size = getattr(engine.pool, "size", None)
    return int(size()) if callable(size) else 1 << 30  # SQLite's pools have no size to grow


def _create_engine(url: str, pool_size: int) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            _use_wal(path)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    settings = get_settings()
    args = postgres_connect_args()
    return create_engine(
        url,
        poolclass=BudgetPool,
        pool_size=pool_size,
        max_overflow=0,  # the budget is the bound: a thread beyond it waits for a connection
        pool_timeout=settings.db_pool_timeout_s,
        pool_pre_ping=_ping_before_checkout,
        pool_recycle=POOL_RECYCLE_S,
        connect_args=session_free_connect_args(args) if settings.db_transaction_pooler else args,
    )


def postgres_connect_args() -> dict[str, Any]:
    """libpq's connection parameters: the session's timeouts, and the connect and keepalive
    timeouts that make a silent server an error within seconds."""
    # A process frozen inside a transaction (SIGSTOP, a stalled VM) keeps its row locks, and a live
    # worker's reclaim of that very document would wait on them: the server ends such a session.
    # No transaction of ours waits between its statements (LLM calls happen outside them).
    options = (
        f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}"
        f" -c statement_timeout={STATEMENT_TIMEOUT_MS}"
    )
    return {
        "options": options,
        "connect_timeout": CONNECT_TIMEOUT_S,
        "keepalives": 1,
        "keepalives_idle": KEEPALIVE_IDLE_S,
        "keepalives_interval": KEEPALIVE_INTERVAL_S,
        "keepalives_count": KEEPALIVE_COUNT,
        "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
    }


def _use_wal(path: str) -> None:
    """Switch a SQLite file to WAL once, under the file lock that migrations use.

    WAL is a property of the file. Switching needs the database to itself, and SQLite answers
    "database is locked" at once, without waiting, when several processes try together.
    """
    with _file_lock(path):
        connection = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
        try:
            (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
            if mode != "wal":
                connection.execute("PRAGMA journal_mode=WAL")
        finally:
            connection.close()


@contextmanager
def _file_lock(database: str) -> Iterator[None]:
    with open(f"{database}.migrate.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def dispose_engines(*, close: bool = True) -> None:
    """Forget every engine and its pool. `close=False` in a forked child: the pooled connections
    are its parent's, and closing them would end the parent's sessions (SQLAlchemy's advice for
    os.fork); the child opens its own."""
    with _engines_lock:
        for engine in _engines.values():
            engine.dispose(close=close)
        _engines.clear()


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A transaction: commit on success, roll back on error."""
    with Session(engine, expire_on_commit=False) as session, session.begin():
        yield session


def alembic_config(url: str) -> Any:
    from alembic.config import Config

    import migrations

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply pending migrations up to `revision`; safe when several processes start at once."""
    from alembic import command

    cfg = alembic_config(url)
    engine = get_engine(url)
    with _sqlite_file_lock(engine), engine.begin() as connection:
        _no_statement_timeout(connection)  # an index on a large table takes what it takes
        _lock_migrations(connection)
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)


def _no_statement_timeout(connection: Connection) -> None:
    """The rest of the connection's transaction runs without `STATEMENT_TIMEOUT_MS`."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SET LOCAL statement_timeout = 0"))


MIGRATION_LOCK_KEY = 7_202_611_290
"""Postgres advisory lock id held while migrating (an arbitrary constant of this project)."""


def _lock_migrations(connection: Connection) -> None:
    """Serialise migrations on Postgres: workers starting together must not each create the
    tables. The lock is the transaction's (released at its commit), not the session's: behind
    a transaction pooler the next transaction may run on another server session."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})


@contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    """Serialise migrations of a SQLite file (Postgres: `_lock_migrations`)."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        yield
        return
    with _file_lock(database):
        yield


SCHEMA_HEAD = "0025"
"""The newest migration's revision (a test checks it against Alembic's): a schema there is
found current without loading Alembic and its scripts, a fifth of a second of every command."""


def pending_migrations(url: str) -> bool:
    """True when the schema at `url` is behind the newest migration."""
    engine = get_engine(url)
    try:
        with engine.connect() as conn:
            if set(conn.execute(text("select version_num from alembic_version")).scalars()) == {SCHEMA_HEAD}:
                return False
    except DBAPIError:  # no version table yet: Alembic says what to do
        pass
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_heads()
    return set(current) != set(ScriptDirectory.from_config(alembic_config(url)).get_heads())


def ensure_schema(url: str) -> Engine:
    """The engine for `url`, with pending migrations applied first."""
    if pending_migrations(url):
        upgrade(url)
    return get_engine(url)


def has_table(engine: Engine, name: str) -> bool:
    return inspect(engine).has_table(name)
