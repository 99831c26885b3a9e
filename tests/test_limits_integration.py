"""The global limit and fault handling with real workers, Redis and the simulator."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from sqlalchemy import select

from pipeline.core.settings import Settings
from pipeline.llm.client import CallRecord, LLMClient
from pipeline.llm.ratelimit import RedisLimiter, Scope, keys
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, LLMCall
from pipeline_dev.bench.procs import sim_stats
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.synth_filings import write_filings
from tests.conftest import claimed_redis_db, run_cli, running_simulator, running_workers

LIMIT_RPM, WINDOW_S = 30, 4


@contextmanager
def _stack(
    base_env: dict[str, str], redis_base: str, logs: Path, sim_args: list[str], **env: str
) -> Iterator[tuple[dict[str, str], str]]:
    """Two workers on their own Redis database, against their own simulator."""
    with claimed_redis_db(redis_base) as redis_url, running_simulator(logs, *sim_args) as sim_url:
        stack_env = {**base_env, "PIPELINE_REDIS_URL": redis_url, "PIPELINE_LLM_BASE_URL": sim_url, **env}
        with running_workers(stack_env, logs):
            yield stack_env, sim_url


@pytest.fixture(scope="module")
def limited(
    pipeline_env: dict[str, str], redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], str]]:
    """Two workers under a global limit, against a simulator enforcing that same limit."""
    sim_args = ["--rpm", str(LIMIT_RPM), "--window-s", str(WINDOW_S), "--p50", "0.3", "--p95", "0.8"]
    limits = {
        "PIPELINE_RATE_LIMIT_RPM": str(LIMIT_RPM),
        "PIPELINE_RATE_LIMIT_WINDOW_S": str(WINDOW_S),
        "PIPELINE_MAX_INFLIGHT": "8",
        # A call admitted at t reaches the provider at t + delay; on a loaded 2-core machine
        # delays differ by more than the 0.5 s default margin, a large share of a 4 s window.
        "PIPELINE_RATE_LIMIT_MARGIN_S": "1.0",
    }
    with _stack(pipeline_env, redis_base, tmp_path_factory.mktemp("limited"), sim_args, **limits) as stack:
        yield stack


def test_two_workers_never_exceed_the_providers_limit(
    limited: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    env, sim_url = limited
    write_filings(tmp_path, 16, seed=21, sizes=[25_000] * 16)
    started = time.monotonic()
    result = run_cli("submit", str(tmp_path), "--wait", env=env)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    stats = sim_stats(sim_url)
    assert stats["max_admitted_in_any_60s_window"] <= LIMIT_RPM  # the simulator's window is WINDOW_S
    # The 1 % goal is the benchmark's (R1); here a loaded machine may delay a few calls more.
    assert stats["rejected_429"] <= 0.05 * stats["requests_total"]
    # The limit was the bottleneck: more calls than one window allows, spread over windows.
    assert stats["requests_total"] > LIMIT_RPM
    assert elapsed >= (stats["requests_total"] / LIMIT_RPM - 1) * WINDOW_S
    status = json.loads(run_cli("status", result.stdout.strip().splitlines()[-1], "--json", env=env).stdout)
    assert status["documents"] == {"extracted": 16}
    assert {s["rpm"] for s in status["limiter"]} == {LIMIT_RPM}


@pytest.fixture(scope="module")
def faulty(
    pipeline_env: dict[str, str], redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], str]]:
    """Two workers against a simulator that fails in every way it can."""
    faults = [
        "--error-rate",
        "0.06",
        "--drop-rate",
        "0.03",
        "--hang-rate",
        "0.02",
        "--bad-json-rate",
        "0.05",
        "--truncate-rate",
        "0.02",
        "--seed",
        "9",
    ]
    logs = tmp_path_factory.mktemp("faulty")
    with _stack(pipeline_env, redis_base, logs, faults, PIPELINE_LLM_TIMEOUT_S="2") as stack:
        yield stack


def test_under_injected_faults_every_document_ends_extracted_or_failed_with_a_reason(
    faulty: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    env, sim_url = faulty
    write_filings(tmp_path, 14, seed=33, sizes=[25_000] * 14)
    result = run_cli("submit", str(tmp_path), "--wait", env=env)
    # 1: the run ended failed (more than 10 % of documents failed); still, every one is accounted for.
    assert result.returncode in (0, 1), result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    engine = get_engine(env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        docs = list(session.scalars(select(Document).where(Document.run_id == run_id)))
        statuses = Counter(session.scalars(select(LLMCall.status).where(LLMCall.run_id == run_id)))
    assert len(docs) == 14
    assert all(d.status == "extracted" or (d.status == "failed" and d.error) for d in docs)
    assert sum(d.status == "extracted" for d in docs) >= 12
    assert statuses["unavailable"] > 0, "faults were injected and retried"
    stats = sim_stats(sim_url)
    assert stats["errors_5xx"] + stats["dropped"] + stats["hung"] > 0


def test_after_one_429_every_worker_pauses(redis_url: str) -> None:
    """Two workers share a provider allowing 2 calls per 3 s: one is refused, both wait it out."""
    client: redis.Redis = redis.Redis.from_url(redis_url)
    with SimServer(SimConfig(rpm=2, window_s=3, p50_s=0, p95_s=0)) as sim:
        settings = Settings(
            _env_file=None, llm_base_url=sim.base_url, redis_url=redis_url, llm_model="pause-test"
        )  # type: ignore[call-arg]
        first, second = (
            LLMClient(settings, pool_size=2, limiter=RedisLimiter.from_settings(settings, 2))
            for _ in range(2)
        )
        scope = Scope(sim.base_url, "pause-test", 0)
        records: list[CallRecord] = []
        messages = [{"role": "user", "content": "Hello there. How are you?"}]
        try:
            for _ in range(2):
                first.text(messages, stage="compress", max_tokens=20, sink=records.append)
            refused = threading.Thread(
                target=first.text,
                args=(messages,),
                kwargs={"stage": "compress", "max_tokens": 20, "sink": records.append},
            )
            refused.start()
            deadline = time.monotonic() + 2
            while not any(r.status == "rate_limited" for r in records) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert second.limiter is not None
            assert second.limiter.view(scope).paused_for_s > 0.5, "the other worker sees the pause"
            second.text(messages, stage="compress", max_tokens=20, sink=records.append)
            refused.join(10)
        finally:
            first.close()
            second.close()
            client.delete(*keys(scope))
        assert sim.stats()["rejected_429"] == 1
        assert [r.status for r in records].count("ok") == 4


def test_routing_weights_models_falls_back_and_spreads_keys() -> None:
    with SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            llm_base_url=sim.base_url,
            llm_models="model-a:80,model-b:20",
            llm_fallback_model="model-c",
            llm_api_keys="sk-one-aaaa,sk-two-bbbb",
        )
        client = LLMClient(settings, pool_size=4, rng=random.Random(7))
        try:
            picks = Counter(client.pick_model("extract") for _ in range(1_000))
            assert 740 <= picks["model-a"] <= 860 and picks["model-a"] + picks["model-b"] == 1_000
            assert client.pick_model("extract", failed_attempts=2) == "model-c"
            assert client.pick_model("compress") == settings.llm_model
            records: list[CallRecord] = []
            for _ in range(20):
                client.text(
                    [{"role": "user", "content": "Hi."}], stage="compress", max_tokens=10, sink=records.append
                )
        finally:
            client.close()
        assert {r.key_slot for r in records} == {0, 1}
        assert all("sk-" not in repr(r) for r in records)


def test_answers_that_are_not_json_twice_are_retried_later_not_failed() -> None:
    from pipeline.core.errors import MalformedAnswer, SchemaViolation
    from pipeline.extraction.schemas import FilingExtraction
    from pipeline.llm.prompts import extract_messages

    with SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        client = LLMClient(Settings(_env_file=None, llm_base_url=sim.base_url), pool_size=2)  # type: ignore[call-arg]
        records: list[CallRecord] = []
        try:
            with pytest.raises(MalformedAnswer):
                client.structured(
                    extract_messages("Revenue grew. [[sim:badjson]]", 0, 1),
                    FilingExtraction,
                    stage="extract",
                    max_tokens=500,
                    sink=records.append,
                )
            with pytest.raises(SchemaViolation):
                client.structured(
                    extract_messages("Revenue grew. [[sim:invalid]]", 0, 1),
                    FilingExtraction,
                    stage="extract",
                    max_tokens=500,
                    sink=records.append,
                )
        finally:
            client.close()
        assert [r.status for r in records] == ["invalid"] * 4
