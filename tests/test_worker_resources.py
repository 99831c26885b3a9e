"""What a worker process sizes and checks before its first task: its database pool, its
settings, its retry countdowns (defects found in review)."""

from __future__ import annotations

from sqlalchemy.exc import TimeoutError as PoolTimeout

from pipeline.core.constants import VISIBILITY_TIMEOUT_S
from pipeline.core.retry import MAX_COUNTDOWN_S, countdown_s
from pipeline.storage.db import get_engine
from tests.conftest import run_cli


def test_the_pool_is_sized_by_the_worker_even_after_ensure_schema_made_an_engine(
    postgres_url: str | None, database_url: str
) -> None:
    get_engine(database_url)  # as ensure_schema does, with the default pool
    engine = get_engine(database_url, pool_size=32)  # as the worker's context asks
    if database_url.startswith("postgresql"):
        assert engine.pool.size() == 32  # type: ignore[attr-defined]
    assert get_engine(database_url, pool_size=8) is engine, "a smaller ask keeps the larger pool"


def test_a_pool_timeout_is_retried_not_failed_as_an_internal_error() -> None:
    from workers.tasks import TRANSIENT

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
