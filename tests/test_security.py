"""Secrets stay secret, pickle is refused, logs carry ids, TLS to Redis is configured."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from sqlalchemy import MetaData, select

from pipeline.core.constants import REPORT_QUEUE
from pipeline.runtime.embedded import Child
from pipeline.storage.db import get_engine
from pipeline_dev.synth_filings import generate_filing
from tests.conftest import claimed_redis_db, eventually, run_cli


@pytest.fixture(scope="module")
def canary_stack(
    pipeline_env: dict[str, str],
    workers: list[Child],
    redis_base: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, str], list[Path], str, list[str]]:
    """A run through the session's workers (JSON logs, the session's API key as the canary)
    whose documents hit the error paths: a provider that echoes the key it refuses, an answer
    that never validates. Its messages are first sent to a Redis database nobody consumes and
    read there, then the run is resumed on the session's stack, whose Redis is read at the end;
    every text found in either comes with it."""
    files = tmp_path_factory.mktemp("canary-files")
    for index, hook in enumerate(["", "", " [[sim:badkey]]", " [[sim:invalid]]"]):
        text, truth = generate_filing(index, seed=91, target_bytes=22_000)
        (files / truth.filename).write_text(text + hook, encoding="utf-8")
    env = pipeline_env
    seen: list[str] = []
    with claimed_redis_db(redis_base) as held:
        submitted = run_cli("submit", str(files), "--fresh", env={**env, "PIPELINE_REDIS_URL": held})
        assert submitted.returncode == 0, submitted.stderr
        client = redis.Redis.from_url(held)
        seen.extend(_redis_texts(client))
        client.close()
    run_id = submitted.stdout.strip().splitlines()[-1]
    resumed = run_cli("resume", run_id, "--wait", env=env)
    assert resumed.returncode == 1, resumed.stderr  # 2 of 4 failed: the run failed
    client = redis.Redis.from_url(env["PIPELINE_REDIS_URL"])
    seen.extend(_redis_texts(client))
    client.close()
    logs = [w.log_path for w in workers if w.log_path is not None]
    return env, logs, run_id, seen


def test_the_redis_scan_reads_message_bodies(pipeline_env: dict[str, str]) -> None:
    """The scan below would find the key in a queued message, whose body is base64."""
    url = pipeline_env["PIPELINE_REDIS_URL"]
    marker = f"sk-marker-{uuid.uuid4().hex}"
    sender = Celery(broker=url)
    client = redis.Redis.from_url(url)
    queue = f"nobody-consumes-{uuid.uuid4().hex[:8]}"
    try:
        sender.send_task("pipeline.watchdog", args=[marker], queue=queue)
        (raw,) = client.lrange(queue, 0, -1)
        assert any(marker in body for body in _message_bodies(raw.decode())), "the base64 body decoded"
        assert any(marker in body for text in _redis_texts(client) for body in _message_bodies(text))
    finally:
        client.delete(queue)
        client.close()
        sender.close()


def test_the_api_key_is_in_no_log_database_row_redis_value_or_output(
    canary_stack: tuple[dict[str, str], list[Path], str, list[str]],
) -> None:
    env, worker_logs, run_id, redis_texts = canary_stack
    key = env["PIPELINE_LLM_API_KEY"]
    for log in worker_logs:
        assert key not in log.read_text(), log
    engine = get_engine(env["PIPELINE_DATABASE_URL"])
    metadata = MetaData()
    metadata.reflect(engine)
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            for row in conn.execute(select(table)):
                assert key not in repr(tuple(row)), f"the key is in table {table.name}"
        refused = conn.execute(
            select(metadata.tables["documents"].c.error).where(
                metadata.tables["documents"].c.run_id == run_id,
                metadata.tables["documents"].c.error.like("%Incorrect API key%"),
            )
        ).scalar_one()
    assert "[redacted]" in refused or "sk-" not in refused
    bodies = [body for text in redis_texts for body in _message_bodies(text)]
    assert bodies, "the scan saw the run's queued messages"
    leaked = [text for text in [*redis_texts, *bodies] if key in text]
    assert not leaked, leaked[:1]
    for args in (["status", run_id, "--json"], ["report", run_id], ["runs"]):
        out = run_cli(*args, env=env)
        assert key not in out.stdout + out.stderr, args


def test_worker_logs_are_json_lines_with_run_and_document_ids(
    canary_stack: tuple[dict[str, str], list[Path], str, list[str]],
) -> None:
    _, worker_logs, run_id, _ = canary_stack
    lines = [line for log in worker_logs for line in log.read_text().splitlines()]
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert records and all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    failures = [r for r in records if "failed:" in r["message"] and r.get("run_id") == run_id]
    assert len(failures) == 2 and all(isinstance(r.get("document_id"), int) for r in failures)


def test_a_pickled_message_is_refused_and_never_run(
    canary_stack: tuple[dict[str, str], list[Path], str, list[str]],
) -> None:
    env, worker_logs, _, _ = canary_stack

    def logs() -> str:
        return "\n".join(log.read_text() for log in worker_logs)

    sender = Celery(broker=env["PIPELINE_REDIS_URL"])
    result = sender.send_task("pipeline.watchdog", serializer="pickle", queue=REPORT_QUEUE)
    eventually("the workers saying something of the pickled message", lambda: "pickle" in logs(), 30)
    log = logs()
    assert "Refusing to deserialize untrusted content of type pickle" in log
    assert f"pipeline.watchdog[{result.id}] received" not in log
    sender.close()


def test_rediss_urls_verify_the_server_certificate() -> None:
    env = {**os.environ, "PIPELINE_REDIS_URL": "rediss://:s3cret-pw@redis.example:6380/0"}
    code = (
        "import ssl; from workers.app import app; "
        "assert app.conf.broker_use_ssl == {'ssl_cert_reqs': ssl.CERT_REQUIRED}; "
        "assert app.conf.redis_backend_use_ssl == {'ssl_cert_reqs': ssl.CERT_REQUIRED}; "
        "app.backend; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def _redis_texts(client: redis.Redis) -> Iterator[str]:
    """Every key and value in the database as text (message bodies still in base64)."""
    for key in client.scan_iter(count=500):
        yield key.decode(errors="replace")
        for value in _redis_values(client, key):
            yield value.decode(errors="replace")


def _redis_values(client: redis.Redis, key: bytes) -> list[bytes]:
    kind = client.type(key).decode()
    if kind == "string":
        return [client.get(key) or b""]
    if kind == "list":
        return list(client.lrange(key, 0, -1))
    if kind == "hash":
        return [b for pair in client.hgetall(key).items() for b in pair]
    if kind == "set":
        return list(client.smembers(key))
    if kind == "zset":
        return list(client.zrange(key, 0, -1))
    return []


def _message_bodies(text: str) -> list[str]:
    """The decoded body of a kombu envelope (an unacknowledged one is [envelope, exchange,
    routing key]); nothing for other values."""
    try:
        value = json.loads(text)
    except ValueError:
        return []
    envelopes = (
        [value]
        if isinstance(value, dict)
        else [v for v in value if isinstance(v, dict)]
        if isinstance(value, list)
        else []
    )
    bodies = []
    for envelope in envelopes:
        body = envelope.get("body")
        if isinstance(body, str) and envelope.get("properties", {}).get("body_encoding") == "base64":
            bodies.append(base64.b64decode(body).decode(errors="replace"))
    return bodies
