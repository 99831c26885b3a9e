"""Every network client has connect and read timeouts and TCP keepalive (issue 28, "liveness from
progress"): the broker, the result backend and the database, as the limiter's Redis already had.
A silent peer (a failover, a NAT that dropped the connection) is then an error within seconds,
not a thread blocked for good."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
import redis
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from pipeline.core.constants import REDIS_TIMEOUT_S
from pipeline.storage import db
from workers.app import app
from workers.backend import SendOnlyRedisBackend


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog does) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


def _keepalive(fd: int) -> tuple[int, int]:
    """The socket's SO_KEEPALIVE and the idle seconds before its first probe."""
    with socket.socket(fileno=os.dup(fd)) as sock:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE), sock.getsockopt(
            socket.IPPROTO_TCP, socket.TCP_KEEPIDLE
        )


def _checked(client: redis.Redis) -> tuple[float | None, int]:
    """The read timeout and SO_KEEPALIVE of a live connection of the client's pool."""
    client.ping()
    connection = client.connection_pool.get_connection()
    try:
        sock = connection._sock
        return sock.gettimeout(), _keepalive(sock.fileno())[0]
    finally:
        client.connection_pool.release(connection)


def test_the_broker_connection_has_timeouts_and_keepalive(redis_url: str) -> None:
    with app.connection_for_write(redis_url) as connection:
        client = connection.default_channel.client
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_connect_timeout"] == REDIS_TIMEOUT_S
        assert _checked(client) == (REDIS_TIMEOUT_S, 1)
    assert app.conf.broker_connection_timeout == REDIS_TIMEOUT_S


def test_the_result_backend_connection_has_timeouts_and_keepalive(redis_url: str) -> None:
    backend = SendOnlyRedisBackend(app=app, url=redis_url)
    assert backend.connparams["socket_connect_timeout"] == REDIS_TIMEOUT_S
    assert backend.connparams["retry_on_timeout"] is False, "a replayed chord count counts twice"
    assert _checked(backend.client) == (REDIS_TIMEOUT_S, 1)


def test_the_database_connection_has_timeouts_keepalive_and_a_statement_timeout(
    postgres_url: str | None,
) -> None:
    if postgres_url is None:
        pytest.skip("Postgres only")
    engine = db.get_engine(postgres_url)
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        params = raw.info.get_parameters()
        assert int(params["connect_timeout"]) == db.CONNECT_TIMEOUT_S
        assert (params["keepalives"], params["tcp_user_timeout"]) == ("1", str(db.TCP_USER_TIMEOUT_MS))
        assert _keepalive(raw.pgconn.socket) == (1, db.KEEPALIVE_IDLE_S)
        setting = text("select setting from pg_settings where name = 'statement_timeout'")
        assert conn.execute(setting).scalar() == str(db.STATEMENT_TIMEOUT_MS)


SILENT_PEER_TIMEOUT_S = 60
"""Generous: each client gives up after one timeout (5 s); without one it waited for good."""


@pytest.mark.timeout(SILENT_PEER_TIMEOUT_S)
def test_a_broker_that_never_answers_is_a_timeout_not_a_hang(silent_port: int) -> None:
    with app.connection_for_write(f"redis://127.0.0.1:{silent_port}/0") as connection:
        with pytest.raises(redis.exceptions.TimeoutError):
            connection.channel()  # opening a channel pings the server


@pytest.mark.timeout(SILENT_PEER_TIMEOUT_S)
def test_a_result_backend_that_never_answers_is_a_timeout_not_a_hang(silent_port: int) -> None:
    backend = SendOnlyRedisBackend(app=app, url=f"redis://127.0.0.1:{silent_port}/0")
    with pytest.raises(redis.exceptions.TimeoutError):
        backend.get("celery-task-meta-anything")


@pytest.mark.timeout(SILENT_PEER_TIMEOUT_S)
def test_a_database_that_never_answers_is_a_timeout_not_a_hang(silent_port: int) -> None:
    url = make_url("postgresql+psycopg://postgres@127.0.0.1/test").set(port=silent_port)
    engine = db.get_engine(url.render_as_string(hide_password=False))
    with pytest.raises(OperationalError, match="timeout"), engine.connect():
        pass
