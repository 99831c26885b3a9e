"""The Postgres pool: in a worker process no ping before each checkout, so a connection the server
dropped fails once, is discarded with every connection made before it, and the next transaction
gets a new one (the task retries the failure); elsewhere (the CLI's waits, which retry nothing)
the ping replaces it unseen.

The server side is real: the pooled sessions are ended with `pg_terminate_backend`, as a restart
or a failover ends them (tests/test_chaos.py restarts a whole private server mid-run).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from pipeline.storage import db
from pipeline.storage.db import POOL_RECYCLE_S, get_engine, ping_before_checkout, session_scope


def _engine(postgres_url: str | None, name: str, ping: bool) -> Iterator[Engine]:
    if postgres_url is None:
        pytest.skip("needs Postgres")
    ping_before_checkout(ping)
    try:
        # An engine of its own (the URL differs), so the session's shared pool is not the one cut.
        made = get_engine(f"{postgres_url}?application_name={name}", pool_size=2)
    finally:
        ping_before_checkout(True)
    yield made
    made.dispose()


@pytest.fixture
def worker_engine(postgres_url: str | None) -> Iterator[Engine]:
    yield from _engine(postgres_url, "pool-test-worker", ping=False)


@pytest.fixture
def cli_engine(postgres_url: str | None) -> Iterator[Engine]:
    yield from _engine(postgres_url, "pool-test-cli", ping=True)


def _backend_pid(engine: Engine) -> int:
    with session_scope(engine) as session:
        return int(session.execute(text("select pg_backend_pid()")).scalar_one())


def _two_pooled_connections_ended(engine: Engine, admin_url: str) -> set[int]:
    """Two connections, idle in the pool when the server ends their sessions; their pids."""
    with engine.connect() as first, engine.connect() as second:
        pids = {
            int(first.execute(text("select pg_backend_pid()")).scalar_one()),
            int(second.execute(text("select pg_backend_pid()")).scalar_one()),
        }
    assert len(pids) == 2 and engine.pool.checkedin() == 2  # type: ignore[attr-defined]
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for pid in pids:
                assert conn.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
    finally:
        admin.dispose()
    return pids


def test_engines_recycle_old_connections_and_ping_only_outside_workers(
    worker_engine: Engine, cli_engine: Engine
) -> None:
    assert worker_engine.pool._pre_ping is False  # type: ignore[attr-defined]
    assert cli_engine.pool._pre_ping is True  # type: ignore[attr-defined]
    assert worker_engine.pool._recycle == cli_engine.pool._recycle == POOL_RECYCLE_S  # type: ignore[attr-defined]
    assert db._ping_before_checkout, "the default, for every process but a worker's"


def test_in_a_worker_a_dropped_connection_fails_once_and_the_pool_starts_afresh(
    worker_engine: Engine, postgres_url: str
) -> None:
    pids = _two_pooled_connections_ended(worker_engine, postgres_url)

    # The first transaction meets a dead session: a disconnect, which the tasks retry.
    with pytest.raises(OperationalError) as failed, session_scope(worker_engine) as session:
        session.execute(text("select 1"))
    assert failed.value.connection_invalidated, "seen as a disconnect: the connection is discarded"

    # The other connection made before the failure is not tried: the next checkout connects anew.
    after = {_backend_pid(worker_engine) for _ in range(3)}
    assert after.isdisjoint(pids)
    with worker_engine.connect() as one, worker_engine.connect() as two:
        for conn in (one, two):
            assert int(conn.execute(text("select pg_backend_pid()")).scalar_one()) not in pids


def test_elsewhere_a_dropped_connection_is_replaced_unseen(cli_engine: Engine, postgres_url: str) -> None:
    pids = _two_pooled_connections_ended(cli_engine, postgres_url)
    assert _backend_pid(cli_engine) not in pids


def test_a_forked_child_leaves_its_parents_connections_open(worker_engine: Engine) -> None:
    """Issue 28, defect 5: a prefork child's `engine.dispose()` closed the connections it had
    inherited, and with them its parent's database sessions (a worker's engine has no ping to
    hide that: the parent's next statement failed)."""
    import os

    from pipeline.storage.db import dispose_engines

    with worker_engine.connect() as conn:  # a pooled connection the child inherits
        conn.execute(text("select 1"))
    pid = os.fork()
    if pid == 0:  # the child, as a prefork worker's starts: its own pool from here
        try:
            dispose_engines(close=False)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    with worker_engine.connect() as conn:  # the same pooled connection, still the parent's
        assert conn.execute(text("select 1")).scalar() == 1
