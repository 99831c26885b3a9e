"""`pipeline flower`: Flower as a real process against the session's broker and real workers.

Every request goes over HTTP to the running Flower; the run it watches goes through the real
workers, Redis, the database and the simulator.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from dotenv import dotenv_values
from sqlalchemy import select

from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings, default
from pipeline.llm import circuit
from pipeline.llm.circuit import Circuit
from pipeline.runs.monitoring import UNAUTHENTICATED_API_ENV, basic_auth, flower_argv
from pipeline.runtime import embedded
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document
from pipeline_dev.synth_filings import generate_filing
from tests.conftest import eventually, run_cli

USER = "ops"
PASSWORD = "flower-test-password:never-logged"  # a colon in a password is allowed
WAIT_S = 20.0

RUN_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Flower:
    child: embedded.Child
    url: str

    def get(self, path: str, auth: tuple[str, str] | None = (USER, PASSWORD)) -> httpx.Response:
        return httpx.get(self.url + path, auth=auth, timeout=10)


@contextmanager
def running_flower(env: dict[str, str], log: Path, *args: str, inherit: bool = True) -> Iterator[Flower]:
    """`pipeline flower ARGS` on a free loopback port, listening; stopped at the end. Its
    environment: this process's with `env` over it, or (`inherit` False) `env` alone."""
    port = embedded.free_port()
    argv = [sys.executable, "-m", "pipeline", "flower", "--port", str(port), *args]
    environment = embedded.child_env(env) if inherit else env
    with embedded.Child("flower", argv, env=environment, log_path=log) as child:
        try:
            embedded.wait_for_port(port, child=child)
        except RuntimeError as exc:
            pytest.fail(f"{exc}: {log.read_text(errors='replace')[-2000:]}")
        yield Flower(child, f"http://127.0.0.1:{port}")


def task_args(task: dict[str, Any]) -> tuple[object, ...]:
    """A task's positional arguments from Flower's repr of them (a chord body's is a list)."""
    value = ast.literal_eval(task["args"])
    assert isinstance(value, tuple | list), task
    return tuple(value)


def node_name(worker: embedded.Child) -> str:
    return worker.name.replace("%h", socket.gethostname())


@pytest.fixture(scope="module")
def flower(
    pipeline_env: dict[str, str],
    workers: list[embedded.Child],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Flower]:
    """Flower with credentials from the environment, receiving the session workers' events."""
    env = {**pipeline_env, "PIPELINE_FLOWER_USER": USER, "PIPELINE_FLOWER_PASSWORD": PASSWORD}
    with running_flower(env, tmp_path_factory.mktemp("flower") / "flower.log") as running:
        # Worker heartbeats reaching /metrics show Flower's event receiver is connected: a run
        # submitted from now on is seen from its first task.
        names = [node_name(w) for w in workers]
        eventually(
            "worker heartbeats in Flower's metrics",
            lambda: all(
                f'flower_worker_online{{worker="{n}"}} 1.0' in running.get("/metrics").text for n in names
            ),
            WAIT_S,
        )
        yield running


def flower_env(**settings: str) -> dict[str, str]:
    """An environment for a `pipeline flower` that must not find credentials elsewhere."""
    return {"PIPELINE_FLOWER_USER": "", "PIPELINE_FLOWER_PASSWORD": "", **settings}


# -- basic auth ---------------------------------------------------------------------------


def test_the_api_refuses_requests_without_the_right_credentials(flower: Flower) -> None:
    assert flower.get("/api/workers", auth=None).status_code == 401
    assert flower.get("/api/workers", auth=(USER, "wrong")).status_code == 401
    assert flower.get("/api/tasks", auth=None).status_code == 401
    assert flower.get("/", auth=None).status_code == 401


def test_an_authenticated_request_lists_the_workers(flower: Flower, workers: list[embedded.Child]) -> None:
    def listed() -> dict[str, Any] | None:
        response = flower.get("/api/workers?refresh=1")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found if {node_name(w) for w in workers} <= set(found) else None

    found = eventually("the workers in /api/workers", listed, WAIT_S)
    for worker in workers:
        queues = {q["name"] for q in found[node_name(worker)]["active_queues"]}
        assert queues == {"extract", "report"}


def test_the_password_is_on_no_command_line_and_in_no_log(flower: Flower) -> None:
    pid = flower.child.process.pid
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert "flower" in cmdline and PASSWORD not in cmdline
    assert flower.child.log_path is not None
    log = flower.child.log_path.read_text(errors="replace")
    assert "Visit me at http://127.0.0.1:" in log
    assert PASSWORD not in log and "never-logged" not in log


def test_metrics_and_healthcheck_are_served_without_credentials(flower: Flower) -> None:
    # Flower 2 exempts these two from authentication (documented in its auth page); the README
    # says so, and the default loopback binding is what keeps them private.
    health = flower.get("/healthcheck", auth=None)
    assert (health.status_code, health.text) == (200, "OK")
    metrics = flower.get("/metrics", auth=None)
    assert metrics.status_code == 200
    assert "# TYPE flower_events_total counter" in metrics.text


def test_metrics_show_an_open_circuit_and_the_calls_it_held(
    flower: Flower, pipeline_env: dict[str, str]
) -> None:
    """An outage in Prometheus: each scrape reads the endpoints' circuits from the broker's Redis
    (Flower's own metrics know tasks only). Three failures open a made-up endpoint's circuit,
    two calls are held; then the probe's answer closes it, and the metrics say so."""
    client = redis.Redis.from_url(pipeline_env["PIPELINE_REDIS_URL"])
    endpoint = f"http://outage-{uuid.uuid4().hex[:8]}.test:8443/v1"
    breaker = Circuit(client, endpoint, failures=3)
    try:
        for _ in range(3):
            breaker.failed(breaker.admit(), "UpstreamUnavailable: 503")
        assert breaker.admit().verdict == "open"
        breaker.count_held(1.5)
        breaker.count_held(2.0)
        text = flower.get("/metrics", auth=None).text
        at = f'{{endpoint="{endpoint}"}}'
        assert f"pipeline_llm_circuit_open{at} 1.0" in text
        assert f"pipeline_llm_circuit_outages_total{at} 1.0" in text
        assert f"pipeline_llm_circuit_held_calls_total{at} 2.0" in text
        assert f"pipeline_llm_circuit_held_seconds_total{at} 3.5" in text
        assert "pipeline_circuit_redis_up 1.0" in text
        with circuit.moved(default("circuit_probe_s")):
            probe = breaker.admit()
            assert probe.verdict == "probe"
            breaker.answered(probe)
        text = flower.get("/metrics", auth=None).text
        assert f"pipeline_llm_circuit_open{at} 0.0" in text
        assert f"pipeline_llm_circuit_outages_total{at} 1.0" in text, "the outage that ended is counted"
    finally:
        client.delete(*circuit.keys(endpoint).keys())
        client.close()


def test_the_compose_healthcheck_passes_with_the_login_and_fails_without(flower: Flower) -> None:
    yaml = pytest.importorskip("yaml", reason="pyyaml is needed to read docker-compose.yml")
    compose = yaml.safe_load((Path(__file__).resolve().parents[1] / "docker-compose.yml").read_text())
    *_, code = compose["services"]["flower"]["healthcheck"]["test"]
    port = flower.url.rsplit(":", 1)[1]

    def check(password: str) -> int:
        env = {
            "PIPELINE_FLOWER_PORT": port,
            "PIPELINE_FLOWER_USER": USER,
            "PIPELINE_FLOWER_PASSWORD": password,
        }
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, timeout=30
        ).returncode

    assert check(PASSWORD) == 0
    assert check("wrong") != 0


def test_flower_turns_task_events_on_in_the_running_workers(
    flower: Flower, workers: list[embedded.Child]
) -> None:
    # The session's workers send no task events (PIPELINE_TASK_EVENTS is off): `pipeline flower`
    # asked them at its start, and Flower asks again every 5 s.
    assert flower.child.log_path is not None
    assert "task events: on in the " in flower.child.log_path.read_text(errors="replace")
    logs = [w.log_path for w in workers if w.log_path is not None]
    assert len(logs) == len(workers)
    eventually(
        "the workers told to send task events",
        lambda: all(
            "Events of group {task} enabled by remote" in p.read_text(errors="replace") for p in logs
        ),
        WAIT_S,
    )


# -- what Flower shows of a run -----------------------------------------------------------


def test_a_runs_tasks_are_listed_with_ids_as_their_only_arguments(
    flower: Flower, pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    texts = []
    for index in (31, 32):
        text, truth = generate_filing(index, seed=7, target_bytes=20_000)
        (tmp_path / truth.filename).write_text(text, encoding="utf-8")
        texts.append((text, truth.company))
    result = run_cli("submit", str(tmp_path / "*.txt"), "--wait", env=pipeline_env)
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    with session_scope(get_engine(pipeline_env["PIPELINE_DATABASE_URL"])) as session:
        document_ids = set(session.scalars(select(Document.id).where(Document.run_id == run_id)))
    assert len(document_ids) == 2

    def args_of(tasks: dict[str, Any], name: str) -> set[tuple[object, ...]]:
        return {task_args(t) for t in tasks.values() if t["name"] == name and t["state"] == "SUCCESS"}

    def run_listed() -> tuple[str, dict[str, Any]] | None:
        response = flower.get("/api/tasks")
        assert response.status_code == 200, response.text
        tasks: dict[str, Any] = response.json()
        extracted = args_of(tasks, "pipeline.extract") >= {(d,) for d in document_ids}
        # finalize carries the run and one of its documents (a run deleted since is told apart)
        finalized = any(
            args[:1] == (run_id,) and set(args[1:]) <= document_ids
            for args in args_of(tasks, "pipeline.finalize")
        )
        return (response.text, tasks) if extracted and finalized else None

    body, tasks = eventually("the run's extract and finalize tasks in /api/tasks", run_listed, WAIT_S)
    assert (run_id,) in args_of(tasks, "pipeline.synthesize")
    for task in tasks.values():  # every task Flower saw, this run's and any other: ids only
        args = task_args(task)
        assert 1 <= len(args) <= 2, task
        assert all(isinstance(a, int) or a is None or RUN_ID.match(str(a)) for a in args), task
        kwargs = ast.literal_eval(task["kwargs"])
        assert set(kwargs) <= {"deferrals"} and all(isinstance(v, int) for v in kwargs.values()), task
    assert pipeline_env["PIPELINE_LLM_API_KEY"] not in body
    for text, company in texts:
        assert company not in body
        for line in (ln for ln in text.splitlines() if len(ln) > 60):
            assert line[:60] not in body
    assert PASSWORD not in body


# -- starting it --------------------------------------------------------------------------


def test_flower_without_credentials_refuses_to_start(pipeline_env: dict[str, str], tmp_path: Path) -> None:
    result = run_cli("flower", env={**pipeline_env, **flower_env()}, cwd=tmp_path, timeout_s=60)
    assert result.returncode == 2
    assert "Flower needs basic auth: set PIPELINE_FLOWER_USER and PIPELINE_FLOWER_PASSWORD" in result.stderr
    assert "--unauthenticated" in result.stderr

    only_user = flower_env(PIPELINE_FLOWER_USER=USER)
    result = run_cli("flower", env={**pipeline_env, **only_user}, cwd=tmp_path, timeout_s=60)
    assert result.returncode == 2
    assert "set PIPELINE_FLOWER_PASSWORD" in result.stderr


def test_flower_unauthenticated_starts_with_a_loud_warning(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**pipeline_env, **flower_env(), UNAUTHENTICATED_API_ENV: "false"}
    with running_flower(env, tmp_path / "flower.log", "--unauthenticated") as open_flower:
        assert open_flower.get("/", auth=None).status_code == 200
        # Flower keeps its HTTP API (which can revoke tasks and stop workers) closed without
        # auth unless FLOWER_UNAUTHENTICATED_API is set as well.
        assert open_flower.get("/api/workers", auth=None).status_code == 401
    log = (tmp_path / "flower.log").read_text()
    assert "WARNING: Flower starts WITHOUT authentication on 127.0.0.1:" in log


def test_flower_under_systemd_serves_with_its_own_env_file_alone(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    """The unit's EnvironmentFile, filled in from its example, is all the environment Flower
    gets (systemd adds little else): no database URL, no LLM key. It serves its API, and the
    circuits' metrics it reads from the broker's Redis."""
    unit = Path(__file__).resolve().parents[1] / "ops" / "systemd" / "pipeline-flower.service"
    (env_file,) = re.findall(r"^EnvironmentFile=-?(.+)$", unit.read_text(), re.M)
    example = unit.with_name(f"{Path(env_file).name}.example")
    assert example.is_file(), f"{env_file} has no example next to the unit"
    values = {key: value or "" for key, value in dotenv_values(example).items()}
    values.update(
        PIPELINE_REDIS_URL=pipeline_env["PIPELINE_REDIS_URL"],
        PIPELINE_FLOWER_USER=USER,
        PIPELINE_FLOWER_PASSWORD=PASSWORD,
    )
    env = {"PATH": os.environ["PATH"], **values}
    with running_flower(env, tmp_path / "flower.log", inherit=False) as alone:
        assert alone.get("/api/workers", auth=None).status_code == 401
        assert alone.get("/api/workers").status_code == 200
        assert "pipeline_circuit_redis_up 1.0" in alone.get("/metrics", auth=None).text
        environ = Path(f"/proc/{alone.child.process.pid}/environ").read_bytes().split(b"\0")
        names = {entry.partition(b"=")[0].decode() for entry in environ if entry}
    assert "PIPELINE_REDIS_URL" in names
    assert not names & {"PIPELINE_DATABASE_URL", "PIPELINE_LLM_API_KEY", "PIPELINE_LLM_BASE_URL"}


# -- the options, pure --------------------------------------------------------------------


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **{"flower_user": None, "flower_password": None, **values})


def test_basic_auth_is_user_colon_password_and_never_in_flowers_arguments() -> None:
    settings = _settings(flower_user="ops", flower_password="pa:ss")
    assert basic_auth(settings, unauthenticated=False) == "ops:pa:ss"
    assert flower_argv("127.0.0.1", 5555) == ["flower", "--address=127.0.0.1", "--port=5555"]


@pytest.mark.parametrize(
    ("values", "unauthenticated", "message"),
    [
        ({}, False, "set PIPELINE_FLOWER_USER and PIPELINE_FLOWER_PASSWORD"),
        ({"flower_user": "ops"}, False, "set PIPELINE_FLOWER_PASSWORD"),
        ({"flower_user": "ops", "flower_password": "change-me"}, False, "is a placeholder"),
        ({"flower_user": "o:ps", "flower_password": "long-password"}, False, "must not contain"),
        ({"flower_user": "ops", "flower_password": "a,b"}, False, "must not contain ','"),
        ({"flower_user": "ops", "flower_password": "long-password"}, True, "drop the flag"),
    ],
)
def test_basic_auth_refuses_what_cannot_work(
    values: dict[str, str], unauthenticated: bool, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        basic_auth(_settings(**values), unauthenticated=unauthenticated)


@pytest.mark.parametrize(("value", "on"), [(None, False), ("false", False), ("true", True)])
def test_workers_send_task_events_only_when_configured(value: str | None, on: bool) -> None:
    env = {k: v for k, v in embedded.child_env({}).items() if k != "PIPELINE_TASK_EVENTS"}
    if value is not None:
        env["PIPELINE_TASK_EVENTS"] = value
    code = (
        "from workers.app import app; c = app.conf; print(c.worker_send_task_events, c.task_send_sent_event)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(on), str(on)]


def test_blank_credentials_mean_none_and_unauthenticated_allows_that() -> None:
    settings = _settings(flower_user=" ", flower_password="")
    assert settings.flower_user is None and settings.flower_password is None
    assert basic_auth(settings, unauthenticated=True) is None
    assert (settings.flower_address, settings.flower_port) == ("127.0.0.1", 5555)
