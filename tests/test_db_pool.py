"""The worker's Postgres pool: no ping before each checkout; a connection the server dropped fails
once, is discarded with every connection made before it, and the next transaction gets a new one.

The server side is real: the pooled sessions are ended with `pg_terminate_backend`, as a restart
or a failover ends them (tests/test_chaos.py restarts a whole private server mid-run).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from pipeline.storage.db import POOL_RECYCLE_S, get_engine, session_scope


@pytest.fixture
def engine(postgres_url: str | None) -> Iterator[Engine]:
    if postgres_url is None:
        pytest.skip("needs Postgres")
    # An engine of its own (the URL differs), so the session's shared pool is not the one cut.
    made = get_engine(f"{postgres_url}?application_name=pool-test", pool_size=2)
    yield made
    made.dispose()


def _backend_pid(engine: Engine) -> int:
    with session_scope(engine) as session:
        return int(session.execute(text("select pg_backend_pid()")).scalar_one())


def _terminate(admin_url: str, pids: set[int]) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for pid in pids:
                assert conn.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
    finally:
        admin.dispose()


def test_the_pool_recycles_old_connections_and_does_not_ping(engine: Engine) -> None:
    assert engine.pool._pre_ping is False  # type: ignore[attr-defined]
    assert engine.pool._recycle == POOL_RECYCLE_S  # type: ignore[attr-defined]


def test_a_dropped_connection_fails_once_and_the_pool_starts_afresh(
    engine: Engine, postgres_url: str
) -> None:
    # Two pooled connections, both idle in the pool when the server ends their sessions.
    with engine.connect() as first, engine.connect() as second:
        pids = {
            int(first.execute(text("select pg_backend_pid()")).scalar_one()),
            int(second.execute(text("select pg_backend_pid()")).scalar_one()),
        }
    assert len(pids) == 2 and engine.pool.checkedin() == 2  # type: ignore[attr-defined]
    _terminate(postgres_url, pids)

    # The first transaction meets a dead session: a disconnect, which the tasks retry.
    with pytest.raises(OperationalError) as failed, session_scope(engine) as session:
        session.execute(text("select 1"))
    assert failed.value.connection_invalidated, "seen as a disconnect: the connection is discarded"

    # The other connection made before the failure is not tried: the next checkout connects anew.
    after = {_backend_pid(engine) for _ in range(3)}
    assert after.isdisjoint(pids)
    with engine.connect() as one, engine.connect() as two:
        for conn in (one, two):
            assert int(conn.execute(text("select pg_backend_pid()")).scalar_one()) not in pids
