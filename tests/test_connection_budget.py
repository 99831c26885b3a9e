"""The connection budget (issue 49): a process holds at most PIPELINE_DB_POOL_SIZE Postgres
connections whatever its threads, a thread that finds them all busy gives up after
PIPELINE_DB_POOL_TIMEOUT_S with an error naming the setting, and the pipeline runs through a
real PgBouncer in transaction mode (PIPELINE_DB_TRANSACTION_POOLER), nothing depending on a
session's state.

The end-to-end runs count the workers' connections by their application_name in
`pg_stat_activity` (directly) and in PgBouncer's `SHOW CLIENTS` (through it)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.exc import TimeoutError as PoolTimeout

from pipeline.core.settings import default, get_settings
from pipeline.storage.connections import (
    OTHER_PROCESS_CONNECTIONS,
    OTHER_PROCESSES,
    ServerRoom,
    budget_line,
    process_connections,
    session_free_connect_args,
)
from pipeline.storage.db import get_engine, postgres_connect_args
from pipeline_dev import pgbouncer
from pipeline_dev.synth_filings import write_filings
from tests.conftest import (
    _admin_postgres_url,
    _in_ci,
    claimed_redis_db,
    new_database,
    run_cli,
    running_workers,
)

WORKERS, THREADS, BUDGET = 2, 16, 3
DOCUMENTS = 16
SAMPLE_S = 0.05


def test_a_default_room_fits_ten_workers_and_says_when_more_will_not() -> None:
    room = ServerRoom(max_connections=100, reserved=3, in_use=10)
    per_worker = process_connections(default("db_pool_size"), threads=32)
    fits_line, fits = budget_line(10, per_worker, room, pooler=False)
    assert fits, fits_line
    assert 10 * per_worker + OTHER_PROCESSES * OTHER_PROCESS_CONNECTIONS <= 97 - 25, "room for other clients"
    line, fits = budget_line(20, per_worker, room, pooler=False)
    assert not fits and "will not fit" in line and "PIPELINE_DB_POOL_SIZE" in line
    assert process_connections(6, threads=1) == 4, "a one-thread process cannot use more"


def test_behind_a_transaction_pooler_nothing_is_set_per_session() -> None:
    args = session_free_connect_args(postgres_connect_args())
    assert args["prepare_threshold"] is None, "no server-side prepared statements"
    assert "options" not in args, "PgBouncer refuses the options startup parameter"
    assert args["connect_timeout"] == postgres_connect_args()["connect_timeout"]


@pytest.fixture
def admin_url() -> str:
    url = _admin_postgres_url()
    if url is None:
        pytest.skip("needs Postgres")
    return url


@contextmanager
def _settings(monkeypatch: pytest.MonkeyPatch, **values: str) -> Iterator[None]:
    for name, value in values.items():
        monkeypatch.setenv(f"PIPELINE_{name.upper()}", value)
    get_settings.cache_clear()
    try:
        yield
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()


def test_the_budget_does_not_follow_the_threads(
    postgres_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if postgres_url is None:
        pytest.skip("needs Postgres")
    with _settings(monkeypatch, worker_concurrency="64", db_pool_size="5"):
        engine = get_engine(f"{postgres_url}?application_name=budget-{uuid.uuid4().hex[:6]}")
    try:
        assert engine.pool.size() == 5  # type: ignore[attr-defined]
        assert engine.pool._max_overflow == 0  # type: ignore[attr-defined]
    finally:
        engine.dispose()


def test_a_wait_past_the_timeout_fails_naming_the_budget(
    postgres_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if postgres_url is None:
        pytest.skip("needs Postgres")
    with _settings(monkeypatch, db_pool_timeout_s="0.3"):
        engine = get_engine(f"{postgres_url}?application_name=budget-{uuid.uuid4().hex[:6]}", pool_size=2)
    try:
        with engine.connect(), engine.connect():
            started = time.monotonic()
            with pytest.raises(PoolTimeout) as waited, engine.connect():
                pass
            assert time.monotonic() - started < 5, "a timeout, not a hang"
        message = str(waited.value)
        assert "PIPELINE_DB_POOL_SIZE" in message and "PIPELINE_DB_POOL_TIMEOUT_S" in message
        assert "all 2 of this process's" in message
    finally:
        engine.dispose()


def test_workers_migrating_together_through_pgbouncer_apply_each_migration_once(
    admin_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migrations' lock is a transaction's: behind a transaction pooler a session's lock
    and its unlock could land on two server sessions (and the lock be held for good)."""
    _pgbouncer_or_skip()
    from pipeline.storage.db import dispose_engines, upgrade

    with (
        new_database(admin_url, prefix="pipeline_budget") as database,
        pgbouncer.running(database, pool_size=4) as bouncer,
        _settings(monkeypatch, db_transaction_pooler="true"),
    ):
        failures: list[BaseException] = []

        def migrate() -> None:
            try:
                upgrade(bouncer.url)
            except BaseException as exc:  # reported below
                failures.append(exc)

        threads = [threading.Thread(target=migrate) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        dispose_engines()
        assert failures == []
        with psycopg.connect(_libpq(database)) as conn:
            versions = conn.execute("select version_num from alembic_version").fetchall()
            locks = conn.execute(
                "select count(*) from pg_locks where locktype = 'advisory' and database = "
                "(select oid from pg_database where datname = current_database())"
            ).fetchone()
        assert len(versions) == 1 and locks == (0,)


class Peak:
    """The most a query counted, sampled over its own connection in a thread until stopped."""

    def __init__(self, conninfo: str, query: str, *params: str, column: str | None = None) -> None:
        self.conn = psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)
        self.query, self.params, self.column = query, params, column
        self.most, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def count(self) -> int:
        cursor = self.conn.execute(self.query, self.params or None)
        if self.column is None:  # a count(*)
            row = cursor.fetchone()
            return int(row[0]) if row else 0
        names = [c.name for c in cursor.description or []]  # PgBouncer's SHOW CLIENTS
        return sum(
            1
            for row in cursor.fetchall()
            if dict(zip(names, row, strict=True)).get("application_name") == self.column
        )

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, self.count())
            time.sleep(SAMPLE_S)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.conn.close()
        return self.most


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _pgbouncer_or_skip() -> None:
    if pgbouncer.binary() is None:
        if _in_ci():
            pytest.fail("CI=true: no pgbouncer (.ci/run installs Debian's package)")
        pytest.skip("no pgbouncer executable: apt-get install -y pgbouncer (CI installs it)")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("via", ["direct", "pgbouncer"])
def test_many_threads_run_within_the_budget(
    via: str, admin_url: str, pipeline_env: dict[str, str], redis_base: str, tmp_path: Path
) -> None:
    """Two workers of 16 threads and a budget of 3 each extract every document, holding at
    most 2 x 3 connections at any moment; through PgBouncer the same run goes over its pool of
    4 server connections, with no prepared statement or session option to lose between them."""
    if via == "pgbouncer":
        _pgbouncer_or_skip()
    tag = uuid.uuid4().hex[:6]
    workers_app, submit_app = f"budget-workers-{tag}", f"budget-submit-{tag}"
    with ExitStack() as stack:
        database = stack.enter_context(new_database(admin_url, prefix="pipeline_budget"))
        redis_url = stack.enter_context(claimed_redis_db(redis_base))
        bouncer = (
            stack.enter_context(pgbouncer.running(database, pool_size=4)) if via == "pgbouncer" else None
        )
        url = bouncer.url if bouncer else database
        env = {
            **pipeline_env,
            "PIPELINE_DATABASE_URL": f"{url}?application_name={submit_app}",
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_DB_POOL_SIZE": str(BUDGET),
            "PIPELINE_DB_TRANSACTION_POOLER": "true" if bouncer else "false",
        }
        upgraded = run_cli("db", "upgrade", env=env)
        assert upgraded.returncode == 0, upgraded.stderr
        worker_env = {**env, "PIPELINE_DATABASE_URL": f"{url}?application_name={workers_app}"}
        logs = tmp_path / "logs"
        logs.mkdir()
        children = stack.enter_context(running_workers(worker_env, logs, count=WORKERS, concurrency=THREADS))
        stats = "select count(*) from pg_stat_activity where "
        name = database.rsplit("/", 1)[-1]
        server = Peak(_libpq(admin_url), stats + "datname = %s", name)
        peak = (
            Peak(bouncer.admin_url, "SHOW CLIENTS", column=workers_app)
            if bouncer
            else Peak(_libpq(admin_url), stats + "application_name = %s", workers_app)
        )
        write_filings(tmp_path / "filings", DOCUMENTS, seed=49, sizes=[3000] * DOCUMENTS)
        submitted = run_cli("submit", str(tmp_path / "filings"), "--wait", "--fresh", env=env)
        held, on_server = peak.stop(), server.stop()
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        run_id = submitted.stdout.strip().splitlines()[-1]
        with psycopg.connect(_libpq(database)) as conn:
            statuses = dict(
                conn.execute(
                    "select status, count(*) from documents where run_id = %s group by status", (run_id,)
                ).fetchall()
            )
        assert statuses == {"extracted": DOCUMENTS}, statuses
        assert 0 < held <= WORKERS * BUDGET, (
            f"{held} connections held by {WORKERS} workers of budget {BUDGET}"
        )
        if bouncer:
            assert on_server <= bouncer.pool_size + 1, f"{on_server} server connections behind PgBouncer"
        said = "".join(c.log_path.read_text(errors="replace") for c in children if c.log_path)
        assert f"x {BUDGET} (PIPELINE_DB_POOL_SIZE)" in said, "the start line counts the connections"
        for trouble in ("too many clients", "prepared statement", "PIPELINE_DB_POOL_SIZE) stayed busy"):
            assert trouble not in said, trouble
