"""Secrets stay secret, pickle is refused, logs carry ids, TLS to Redis is configured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from sqlalchemy import MetaData, select

from pipeline.core.constants import REPORT_QUEUE
from pipeline.storage.db import get_engine
from pipeline_dev.synth_filings import generate_filing
from tests.conftest import claimed_redis_db, run_cli, running_workers

CANARY = f"sk-canary-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def canary_stack(
    pipeline_env: dict[str, str], redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], Path, str]]:
    """A worker with a canary API key and JSON logs, and a run through it whose documents hit
    the error paths: a provider that echoes the key it refuses, an answer that never validates."""
    logs = tmp_path_factory.mktemp("canary")
    files = tmp_path_factory.mktemp("canary-files")
    for index, hook in enumerate(["", "", " [[sim:badkey]]", " [[sim:invalid]]"]):
        text, truth = generate_filing(index, seed=91, target_bytes=22_000)
        (files / truth.filename).write_text(text + hook, encoding="utf-8")
    with claimed_redis_db(redis_base) as redis_url:
        env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_API_KEY": CANARY,
            "PIPELINE_LOG_FORMAT": "json",
            "PIPELINE_TASK_MAX_RETRIES": "1",
        }
        with running_workers(env, logs, count=1, concurrency=2):
            result = run_cli("submit", str(files), "--wait", "--fresh", env=env)
            assert result.returncode == 1, result.stderr  # 2 of 4 failed: the run failed
            run_id = result.stdout.strip().splitlines()[-1]
            yield env, logs / "worker-0.log", run_id


def test_the_api_key_is_in_no_log_database_row_redis_value_or_output(
    canary_stack: tuple[dict[str, str], Path, str],
) -> None:
    env, worker_log, run_id = canary_stack
    assert CANARY not in worker_log.read_text()
    engine = get_engine(env["PIPELINE_DATABASE_URL"])
    metadata = MetaData()
    metadata.reflect(engine)
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            for row in conn.execute(select(table)):
                assert CANARY not in repr(tuple(row)), f"the key is in table {table.name}"
        refused = conn.execute(
            select(metadata.tables["documents"].c.error).where(
                metadata.tables["documents"].c.run_id == run_id,
                metadata.tables["documents"].c.error.like("%Incorrect API key%"),
            )
        ).scalar_one()
    assert "[redacted]" in refused or "sk-" not in refused
    client = redis.Redis.from_url(env["PIPELINE_REDIS_URL"])
    for key in client.scan_iter(count=500):
        assert CANARY.encode() not in key and CANARY not in repr(_redis_value(client, key)), key
    client.close()
    for args in (["status", run_id, "--json"], ["report", run_id], ["runs"]):
        out = run_cli(*args, env=env)
        assert CANARY not in out.stdout + out.stderr, args


def test_worker_logs_are_json_lines_with_run_and_document_ids(
    canary_stack: tuple[dict[str, str], Path, str],
) -> None:
    _, worker_log, run_id = canary_stack
    records = [json.loads(line) for line in worker_log.read_text().splitlines() if line.startswith("{")]
    assert records and all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    failures = [r for r in records if "failed:" in r["message"] and r.get("run_id") == run_id]
    assert len(failures) == 2 and all(isinstance(r.get("document_id"), int) for r in failures)


def test_a_pickled_message_is_refused_and_never_run(canary_stack: tuple[dict[str, str], Path, str]) -> None:
    env, worker_log, _ = canary_stack
    sender = Celery(broker=env["PIPELINE_REDIS_URL"])
    result = sender.send_task("pipeline.watchdog", serializer="pickle", queue=REPORT_QUEUE)
    deadline = time.monotonic() + 30
    while "pickle" not in worker_log.read_text():
        assert time.monotonic() < deadline, "the worker said nothing about the pickled message"
        time.sleep(0.3)
    log = worker_log.read_text()
    assert "Refusing to deserialize untrusted content of type pickle" in log
    assert f"pipeline.watchdog[{result.id}] received" not in log
    sender.close()


def test_rediss_urls_verify_the_server_certificate() -> None:
    env = {**os.environ, "PIPELINE_REDIS_URL": "rediss://:secret@redis.example:6380/0"}
    code = (
        "import ssl; from workers.app import app; "
        "assert app.conf.broker_use_ssl == {'ssl_cert_reqs': ssl.CERT_REQUIRED}; "
        "assert app.conf.redis_backend_use_ssl == {'ssl_cert_reqs': ssl.CERT_REQUIRED}; "
        "app.backend; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def _redis_value(client: redis.Redis, key: bytes) -> object:
    kind = client.type(key).decode()
    if kind == "string":
        return client.get(key)
    if kind == "list":
        return client.lrange(key, 0, -1)
    if kind == "hash":
        return client.hgetall(key)
    if kind == "set":
        return client.smembers(key)
    if kind == "zset":
        return client.zrange(key, 0, -1)
    return None
