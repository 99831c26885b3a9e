"""What a worker process sizes and checks before its first task: its database pool, its
settings, its retry countdowns (defects found in review)."""

from __future__ import annotations

import random

import pytest
from sqlalchemy.exc import TimeoutError as PoolTimeout

from pipeline.core.constants import VISIBILITY_TIMEOUT_S
from pipeline.core.errors import Deferred
from pipeline.core.retry import MAX_COUNTDOWN_S, countdown_s
from pipeline.core.settings import Settings
from pipeline.llm.client import CALL_ATTEMPTS, CallRecord, LLMClient
from pipeline.llm.ratelimit import RedisLimiter
from pipeline.storage.db import get_engine
from pipeline_dev.sim import SimConfig, SimServer
from tests.conftest import claimed_redis_db, run_cli


def test_the_pool_is_sized_by_the_worker_even_after_ensure_schema_made_an_engine(
    postgres_url: str | None, database_url: str
) -> None:
    get_engine(database_url)  # as ensure_schema does, with the default pool
    engine = get_engine(database_url, pool_size=32)  # as the worker's context asks
    if database_url.startswith("postgresql"):
        assert engine.pool.size() == 32  # type: ignore[attr-defined]
    assert get_engine(database_url, pool_size=8) is engine, "a smaller ask keeps the larger pool"


def test_a_pool_timeout_is_retried_not_failed_as_an_internal_error() -> None:
    from workers.task_retry import TRANSIENT

    assert issubclass(PoolTimeout, TRANSIENT)


def test_a_retry_countdown_stays_below_the_visibility_timeout() -> None:
    """A provider reset of hours, held as an ETA message past the visibility timeout, would be
    handed out again by Redis and run twice."""
    assert countdown_s(6 * 3600) == MAX_COUNTDOWN_S < VISIBILITY_TIMEOUT_S
    assert countdown_s(None) == 0 and countdown_s(2.5) == 2.5


def test_a_worker_refuses_to_start_on_a_setting_that_cannot_work(pipeline_env: dict[str, str]) -> None:
    result = run_cli("worker", env={**pipeline_env, "PIPELINE_LLM_MODELS": "sim-1:heavy"}, timeout_s=60)
    assert result.returncode == 2
    assert "PIPELINE_LLM_MODELS: weight of 'sim-1' is not a number" in result.stderr


class _NoJitter(random.Random):
    """Backoff without its random part, so that only the limiter's waits stand between tries."""

    def uniform(self, a: float, b: float) -> float:
        return a


def test_the_in_place_wait_cap_holds_for_a_call_over_all_its_attempts(redis_base: str) -> None:
    """Each try of a call failing with 5xx waits its turn (one a second). The second try waits
    up to 1 s and the third up to 1 s more: each under the 1.5 s cap, together over it, so the
    call goes back to the queue instead of waiting in place try after try (it waited 3 s and
    failed after four tries before the fix). How long a try waits depends on how long the one
    before took, so on a slow machine a third try may still fit under the cap."""
    with claimed_redis_db(redis_base) as url, SimServer(SimConfig(p50_s=0, p95_s=0, error_rate=1.0)) as sim:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            llm_base_url=sim.base_url,
            redis_url=url,
            rate_limit_rpm=1,
            rate_limit_window_s=1.0,
            limiter_max_wait_s=1.5,
        )
        client = LLMClient(
            settings, pool_size=1, limiter=RedisLimiter.from_settings(settings, 1), rng=_NoJitter()
        )
        records: list[CallRecord] = []
        with pytest.raises(Deferred):
            client.text(
                [{"role": "user", "content": "hi"}], stage="extract", max_tokens=10, sink=records.append
            )
        client.close()
    assert {r.status for r in records} == {"unavailable"} and 2 <= len(records) < CALL_ATTEMPTS
    assert sum(r.limiter_wait_ms for r in records) <= 1500
