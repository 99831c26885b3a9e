"""The Postgres connection budget: how many connections one process may hold, what a wait for
one of them ends in, what a transaction pooler (PgBouncer, transaction mode) needs of a
connection, and whether a deployment's processes fit the server.

A worker's threads share its budget (PIPELINE_DB_POOL_SIZE): they spend most of a document
waiting on the LLM, holding no connection (each step opens its own short transaction), so a
few connections serve 32 threads, and ten workers fit a server of the default 100.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import QueuePool

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.pool import ConnectionPoolEntry

OTHER_PROCESS_CONNECTIONS = 2
"""What beat, Flower and one submit (or another CLI command) each hold at most in practice: a
transaction at a time, and the migration check's connection."""
OTHER_PROCESSES = 3
"""beat, Flower, and one submit or status at a time."""


class BudgetPool(QueuePool):
    """A QueuePool of `pool_size` connections and no overflow, whose timeout says which setting
    bounds it. The error stays SQLAlchemy's TimeoutError (`db.UNREACHABLE`: a task retries it)."""

    def _do_get(self) -> ConnectionPoolEntry:
        try:
            return super()._do_get()
        except PoolTimeout as exc:
            raise PoolTimeout(
                f"no database connection came free in {self._timeout:g} s (PIPELINE_DB_POOL_TIMEOUT_S): "
                f"all {self.size()} of this process's (PIPELINE_DB_POOL_SIZE) stayed busy; "
                "a slow or locked database, or a budget too small for this process's threads"
            ) from exc


def session_free_connect_args(args: dict[str, Any]) -> dict[str, Any]:
    """libpq's and psycopg's connect arguments for a transaction pooler: consecutive
    transactions may run on different server sessions, so nothing is set per session.

    - No server-side prepared statements: psycopg prepares a query after 5 executions
      (`prepare_threshold`) and the next transaction may find another session without it.
    - No `options` startup parameter (PgBouncer refuses it): the timeouts it set go on the
      database or role instead (docs/operations.md)."""
    return {**{k: v for k, v in args.items() if k != "options"}, "prepare_threshold": None}


POOLER_REFUSED_OPTIONS = "unsupported startup parameter"
"""PgBouncer's answer to a connection that sets `options`: the URL reaches a pooler."""


@dataclass(frozen=True)
class ServerRoom:
    """What the Postgres server allows, as its `pg_settings` and `pg_stat_activity` say."""

    max_connections: int
    reserved: int
    """superuser_reserved_connections (and reserved_connections where the server has it)."""
    in_use: int
    """Client backends connected now, every database's."""

    @property
    def allowed(self) -> int:
        """Connections open to ordinary roles."""
        return self.max_connections - self.reserved


def server_room(engine: Engine) -> ServerRoom:
    """The server's limits and current client count (one short read)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "select name, setting::int from pg_settings where name in "
                "('max_connections', 'superuser_reserved_connections', 'reserved_connections')"
            )
        )
        settings: dict[str, int] = {str(name): int(value) for name, value in rows}
        in_use = conn.execute(
            text("select count(*) from pg_stat_activity where backend_type = 'client backend'")
        ).scalar_one()
    reserved = settings.get("superuser_reserved_connections", 0) + settings.get("reserved_connections", 0)
    return ServerRoom(int(settings["max_connections"]), int(reserved), int(in_use))


def process_connections(budget: int, threads: int) -> int:
    """The most one worker process opens: its budget, or fewer when its task threads, their
    chunk pool and the heartbeat cannot use that many at once."""
    return min(budget, 2 * threads + 2)


def needed(workers: int, per_worker: int) -> int:
    """The deployment's connections: its workers' and the others' (beat, Flower, a submit)."""
    return workers * per_worker + OTHER_PROCESSES * OTHER_PROCESS_CONNECTIONS


def budget_line(workers: int, per_worker: int, room: ServerRoom, *, pooler: bool) -> tuple[str, bool]:
    """The worker's start line on connections, and whether the deployment fits the server (and
    this worker's budget, beside the connections open now)."""
    need = needed(workers, per_worker)
    said = (
        f"database connections: {workers} worker process(es) x {per_worker} (PIPELINE_DB_POOL_SIZE) + "
        f"{OTHER_PROCESSES * OTHER_PROCESS_CONNECTIONS} for beat, Flower and a submit = {need}, "
        f"of the server's {room.allowed} (max_connections {room.max_connections}, "
        f"{room.reserved} reserved; {room.in_use} in use now)"
    )
    if pooler:  # the server sees the pooler's pool, not these
        return f"{said}; through a transaction pooler, which must accept {need} clients", True
    if need > room.allowed or room.in_use + per_worker > room.allowed:
        return (
            f"{said}: it will not fit. Lower PIPELINE_DB_POOL_SIZE or the workers, raise "
            "max_connections, or put PgBouncer in front (docs/operations.md)",
            False,
        )
    return said, True
