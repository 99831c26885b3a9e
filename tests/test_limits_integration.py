"""The global limit and fault handling with real workers, Redis and the simulator."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
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
from tests.conftest import claimed_redis_db, eventually, run_cli, running_simulator, running_workers

# A provider like OpenAI's: a per-minute quota, enforced per second as well (the simulator's
# default), 20 calls and 70,000 tokens a second. Small chunks make a run request-bound, chunks
# of several thousand tokens make it token-bound.
PROVIDER_RPM, PROVIDER_TPM = 1_200, 4_200_000
PROVIDER_ARGS = [
    "--rpm",
    str(PROVIDER_RPM),
    "--tpm",
    str(PROVIDER_TPM),
    "--p50",
    "0.3",
    "--p95",
    "0.8",
]
CONCURRENCY = 32


@contextmanager
def _stack(
    base_env: dict[str, str],
    redis_base: str,
    logs: Path,
    sim_args: list[str],
    concurrency: int = 4,
    **env: str,
) -> Iterator[tuple[dict[str, str], str]]:
    """Two workers on their own Redis database, against their own simulator."""
    with claimed_redis_db(redis_base) as redis_url, running_simulator(logs, *sim_args) as sim_url:
        stack_env = {**base_env, "PIPELINE_REDIS_URL": redis_url, "PIPELINE_LLM_BASE_URL": sim_url, **env}
        with running_workers(stack_env, logs, concurrency=concurrency):
            yield stack_env, sim_url


@dataclass(frozen=True)
class Use:
    """What a run cost the provider's quota, from the provider's side."""

    share_429: float
    requests_quota_used: float
    tokens_quota_used: float


def _run_against_the_provider(env: dict[str, str], sim_url: str, files: Path, chunk_tokens: int) -> Use:
    httpx.post(sim_url.removesuffix("/v1") + "/sim/reset", timeout=10).raise_for_status()
    result = run_cli(
        "submit", str(files), "--wait", "--fresh", env={**env, "PIPELINE_CHUNK_TOKENS": str(chunk_tokens)}
    )
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    status = json.loads(run_cli("status", run_id, "--json", env=env).stdout)
    assert status["documents"] == {"extracted": len(list(files.iterdir()))}, "nothing lost"
    stats = sim_stats(sim_url)
    # While busy: the first 90 % of admissions (the last documents' chains and the report trail).
    return Use(
        share_429=stats["rejected_429"] / stats["requests_total"],
        requests_quota_used=stats["busy_admitted"] / (stats["busy_s"] * PROVIDER_RPM / 60),
        tokens_quota_used=stats["busy_charged_tokens"] / (stats["busy_s"] * PROVIDER_TPM / 60),
    )


@pytest.fixture(scope="module")
def paced(
    pipeline_env: dict[str, str], redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], str]]:
    """Two workers × 32 threads with the provider's limits configured."""
    limits = {"PIPELINE_RATE_LIMIT_RPM": str(PROVIDER_RPM), "PIPELINE_RATE_LIMIT_TPM": str(PROVIDER_TPM)}
    logs = tmp_path_factory.mktemp("paced")
    with _stack(pipeline_env, redis_base, logs, PROVIDER_ARGS, CONCURRENCY, **limits) as stack:
        yield stack


# Bounds loose enough for a shared 2-core machine; the tight figures are the bench's (R1, R1t, R1z).
MAX_SHARE_429 = 0.05
MIN_QUOTA_USED = 0.6


def test_request_bound_two_workers_pace_at_the_providers_per_second_rate(
    paced: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    env, sim_url = paced
    write_filings(tmp_path, 12, seed=21, sizes=[25_000] * 12)
    use = _run_against_the_provider(env, sim_url, tmp_path, chunk_tokens=800)
    assert use.share_429 <= MAX_SHARE_429
    assert use.requests_quota_used >= MIN_QUOTA_USED, use
    assert use.requests_quota_used <= 1.05, "never above the quota"
    assert use.tokens_quota_used < use.requests_quota_used, "requests, not tokens, were the bound"


def test_token_bound_two_workers_pace_at_the_providers_token_rate(
    paced: tuple[dict[str, str], str], tmp_path: Path
) -> None:
    env, sim_url = paced
    write_filings(tmp_path, 16, seed=22, sizes=[60_000] * 16)
    use = _run_against_the_provider(env, sim_url, tmp_path, chunk_tokens=6_000)
    assert use.share_429 <= MAX_SHARE_429
    assert use.tokens_quota_used >= MIN_QUOTA_USED, use
    assert use.tokens_quota_used <= 1.05, "never above the quota"
    assert use.requests_quota_used < use.tokens_quota_used, "tokens, not requests, were the bound"
    status = json.loads(run_cli("status", "--json", env=env).stdout)
    (scope,) = status["limiter"]
    assert (scope["rpm"], scope["tpm"], scope["limits_from"]) == (PROVIDER_RPM, PROVIDER_TPM, "configured")


def test_with_no_limit_configured_the_limits_are_learned_from_the_providers_headers(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    with _stack(pipeline_env, redis_base, logs, PROVIDER_ARGS, CONCURRENCY) as (env, sim_url):
        write_filings(tmp_path / "filings", 12, seed=23, sizes=[25_000] * 12)
        use = _run_against_the_provider(env, sim_url, tmp_path / "filings", chunk_tokens=800)
        status = json.loads(run_cli("status", "--json", env=env).stdout)
    assert use.share_429 <= MAX_SHARE_429
    assert use.requests_quota_used >= MIN_QUOTA_USED, use
    (scope,) = status["limiter"]
    assert scope["limits_from"] == "learned from headers"
    assert (scope["rpm"], scope["learned_rpm"], scope["learned_tpm"]) == (0, PROVIDER_RPM, PROVIDER_TPM)


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
    with SimServer(SimConfig(rpm=2, window_s=3, p50_s=0, p95_s=0, quantize=False)) as sim:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            llm_base_url=sim.base_url,
            redis_url=redis_url,
            llm_model="pause-test",
            rate_limit_learn=False,  # the 429 is the point here: do not let the headers avoid it
        )
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
            eventually(
                "the third call refused with a 429",
                lambda: any(r.status == "rate_limited" for r in records),
                timeout_s=2,
            )
            assert second.limiter is not None
            assert second.limiter.view(scope).paused_for_s > 0.5, "the other worker sees the pause"
            second.text(messages, stage="compress", max_tokens=20, sink=records.append)
            refused.join(10)
        finally:
            first.close()
            second.close()
            client.delete(*keys(scope).all())
        # The pause lasts until the first of the two slots frees; the two callers that waited it
        # out then go together, and the second slot may free a moment after they arrive.
        assert sim.stats()["rejected_429"] in (1, 2)
        assert [r.status for r in records].count("ok") == 4


def test_a_refused_call_gives_its_tokens_back(redis_url: str) -> None:
    """A 429 is not charged tokens: the refused call's reservation would otherwise hold a
    window's worth of token quota that the provider never counted."""
    from pipeline.core.errors import Deferred

    with SimServer(SimConfig(rpm=1, window_s=60, p50_s=0, p95_s=0, quantize=False)) as sim:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            llm_base_url=sim.base_url,
            redis_url=redis_url,
            llm_model="refund-test",
            rate_limit_learn=False,
            # A limit in force, never binding (the window alone, no pacing): without one, calls
            # keep no window at all.
            rate_limit_tpm=1_000_000,
            rate_limit_pacing=False,
            limiter_max_wait_s=0,  # after the 429's pause the call goes back to the queue
        )
        client = LLMClient(settings, pool_size=1, limiter=RedisLimiter.from_settings(settings, 1))
        scope = Scope(sim.base_url, "refund-test", 0)
        records: list[CallRecord] = []
        messages = [{"role": "user", "content": "Revenue grew in every segment. " * 40}]
        try:
            client.text(messages, stage="compress", max_tokens=20, sink=records.append)
            with pytest.raises(Deferred):
                client.text(messages, stage="compress", max_tokens=20, sink=records.append)
            assert client.limiter is not None
            view = client.limiter.view(scope)
        finally:
            client.close()
            redis.Redis.from_url(redis_url).delete(*keys(scope).all())
    assert [r.status for r in records] == ["ok", "rate_limited"]
    assert view.requests_in_window == 2, "the refused request still counts as a request"
    assert view.tokens_in_window == records[0].prompt_tokens + 20, "only what was charged"


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


def test_reservations_follow_the_prompt_tokens_the_provider_counts() -> None:
    """Without a tokenizer for the model the estimate errs high (3 characters a token); after an
    answer, reservations are scaled to what the provider counted, with a small margin."""
    from pipeline.llm.tokens import estimate_prompt

    with SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        settings = Settings(_env_file=None, llm_base_url=sim.base_url, llm_model="sim-1")  # type: ignore[call-arg]
        client = LLMClient(settings, pool_size=2)
        messages = [{"role": "user", "content": "Revenue grew in every segment. " * 300}]
        estimate = estimate_prompt("sim-1", messages)
        records: list[CallRecord] = []
        try:
            client.text(messages, stage="compress", max_tokens=10, sink=records.append)  # type: ignore[arg-type]
        finally:
            client.close()
    counted = records[0].prompt_tokens
    assert counted < 0.9 * estimate, "the simulator counts fewer tokens than the conservative estimate"
    assert counted <= client._calibrated("sim-1", estimate) <= 1.06 * counted
