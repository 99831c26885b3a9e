"""The deadline planner over three tiers (`pipeline.runs.tiers`): where an auto run starts, what
the batch path hands over at its cutover, the moment flex gives way to the standard tier, and
each document's tier; then a flex call refused near that moment, through the real openai SDK
against the simulator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete

from pipeline.core.deadline import fixed_deadline
from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings, get_settings
from pipeline.extraction.schemas import FilingExtraction
from pipeline.ingest.producer import SubmitPlan, prepare_run
from pipeline.llm.client import CallRecord, LLMClient
from pipeline.llm.prompts import extract_messages
from pipeline.llm.ratelimit import RedisLimiter
from pipeline.llm.ratelimit import clock as ratelimit_clock
from pipeline.llm.retry_policy import flex_gives_way
from pipeline.runs.mode import decide, fix_deadline
from pipeline.runs.tiers import SAFETY, document_tier, plan_auto, plan_handover, tiers_line
from pipeline.storage import clock
from pipeline.storage.db import session_scope
from pipeline.storage.models import Run, aware
from pipeline.storage.tiers import RunPlan
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.synth_filings import write_filings

NOW = datetime(2026, 12, 5, 2, 0, tzinfo=UTC)
SETTINGS = Settings(
    _env_file=None,  # type: ignore[call-arg]
    batch_min_room_s=1800,
    batch_deadline_margin_s=300,
    flex_slowdown=2.0,
)


AUTO = Settings(
    _env_file=None,  # type: ignore[call-arg]
    llm_mode="auto",
    batch_min_room_s=86_400,  # no room for a batch: flex when it fits, else the standard tier
    batch_deadline_margin_s=60,
)


def at(minutes: float) -> datetime:
    return NOW + timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("deadline_min", "sync_s", "mode", "tier", "said"),
    [
        # Without a deadline the price decides.
        (None, 600, "batch", None, "no deadline"),
        # Flex needs 600 x 2 x 1.25 + 300 = 1,800 s: 4 h leave 3h30m beyond it, room for a batch.
        (240, 600, "batch", "flex", "batch first, flex for what the batches have not answered"),
        # 45 min: 15 min beyond what flex needs, less than a batch's 30 min; flex fits.
        (45, 600, "flex", "flex", "no room for a batch"),
        # 20 min: flex would need 30; the standard tier (600 x 1.25 + 300 = 17.5 min) is all that fits.
        (20, 600, "sync", "sync", "more than the"),
    ],
)
def test_an_auto_run_starts_at_the_cheapest_tier_that_makes_its_deadline(
    deadline_min: float | None, sync_s: float, mode: str, tier: str | None, said: str
) -> None:
    deadline = at(deadline_min) if deadline_min is not None else None
    plan = plan_auto(SETTINGS, deadline, sync_s, NOW)
    assert (plan.mode, plan.extract_tier) == (mode, tier)
    assert said in plan.reason, plan.reason
    assert plan.reason.startswith("auto:")


def test_flex_gives_way_when_only_the_standard_tier_still_makes_the_deadline() -> None:
    deadline = at(45)
    plan = plan_handover(SETTINGS, deadline, 600, NOW, "cutover")
    assert plan.mode == plan.extract_tier == "flex"
    assert plan.standard_from == deadline - timedelta(seconds=600 * SAFETY + 300)
    assert "by " in plan.reason and "goes at the standard tier" in plan.reason
    assert plan.standard_from is not None
    moment = plan.standard_from.timestamp()
    assert not flex_gives_way(moment, moment - 10)
    assert flex_gives_way(moment, moment - 10, wait_s=10), "a refusal waited out past it is not waited out"
    assert flex_gives_way(moment, moment + 1)
    assert not flex_gives_way(None, moment + 1e6, wait_s=1e6), "a flex run with no deadline never gives way"


NO_PLAN = RunPlan("sync", None, None, "default: neither --mode nor PIPELINE_LLM_MODE was given")
PLANNED = RunPlan("batch", "flex", at(40), "cutover at 02:10:00: the batches had not answered everything")


@pytest.mark.parametrize(
    ("modes", "run", "tier", "said"),
    [
        (set(), PLANNED, "reused", "earlier run"),
        ({"batch"}, PLANNED, "batch", "batches answered every chunk"),
        ({"batch", "flex"}, PLANNED, "flex", "answered part of it before the cutover"),
        ({"flex"}, PLANNED, "flex", "cutover at 02:10:00"),
        ({"flex", "sync"}, PLANNED, "sync", "the standard tier finished it to make the deadline"),
        (
            {"batch", "sync"},
            RunPlan("batch", None, None, "asked for: --mode batch"),
            "sync",
            "by the cutover",
        ),
        ({"sync"}, NO_PLAN, "sync", "default: neither"),
    ],
)
def test_a_document_s_tier_is_the_dearest_its_answers_used_with_the_reason(
    modes: set[str], run: RunPlan, tier: str, said: str
) -> None:
    found, reason = document_tier(modes, run)
    assert found == tier and said in reason, reason


def test_the_tiers_line_goes_from_the_cheapest_up() -> None:
    assert (
        tiers_line({"sync": 2, "flex": 30, "batch": 1_200, "reused": 3})
        == "3 reused, 1,200 batch, 30 flex, 2 sync"
    )


def test_a_flex_call_refused_near_its_standard_moment_goes_at_the_standard_tier_at_once() -> None:
    """The simulator refuses every flex call (429 Resource Unavailable); once waiting out the
    next refusal would pass the call's standard moment, it is sent again at once at the
    standard tier and answered, at sync prices."""
    config = SimConfig(p50_s=0, p95_s=0, seed=3, flex_unavailable_rate=1.0)
    with SimServer(config) as sim:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            llm_base_url=sim.base_url,
            llm_model="sim-1",
            llm_prices="sim-1:1.0/2.0",
            llm_batch_discount=0.5,
        )
        client = LLMClient(settings, pool_size=1)
        records: list[CallRecord] = []
        try:
            client.structured(
                extract_messages("Item 7. Revenue was $12.5 million in fiscal 2023.", 0, 1),
                FilingExtraction,
                stage="extract",
                max_tokens=400,
                sink=records.append,
                service_tier="flex",
                standard_from=time.time() + 2.0,  # within a backoff or two
            )
        finally:
            client.close()
        stats = sim.stats()
    *refused, answered = records
    assert refused and {(r.status, r.mode) for r in refused} == {("no_capacity", "flex")}, records
    assert (answered.status, answered.mode) == ("ok", "sync"), records
    assert stats["flex_unavailable"] == stats["flex_requests"] == len(refused)
    assert answered.cost_usd == pytest.approx(
        (answered.prompt_tokens * 1.0 + answered.completion_tokens * 2.0) / 1e6
    ), "at the standard tier's price"


def test_the_synchronous_estimate_counts_the_limits_per_their_window() -> None:
    """PIPELINE_RATE_LIMIT_RPM is requests per PIPELINE_RATE_LIMIT_WINDOW_S: 60 a 6 s window
    is 600 a minute, and 600 calls take a minute, not ten."""
    from pipeline.runs.mode import ASSUMED_RPM, sync_estimate_s

    assert sync_estimate_s(600, 0, 60, 0, window_s=6.0) == pytest.approx(60.0)
    assert sync_estimate_s(600, 1_200_000, 0, 100_000, window_s=10.0) == pytest.approx(120.0)
    assert sync_estimate_s(ASSUMED_RPM, 0, 0, 0, window_s=1.0) == pytest.approx(60.0), "none: a minute's"


@pytest.fixture
def stored_run(engine: Engine, tmp_path: Path) -> Iterator[SubmitPlan]:
    """A stored run of one small filing, as a submit leaves it before its mode is chosen."""
    write_filings(tmp_path, 1, seed=471, sizes=[6_000])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    yield plan
    with session_scope(engine) as session:
        session.execute(delete(Run).where(Run.id == plan.run_id))


def _database_now(engine: Engine) -> datetime:
    with session_scope(engine) as session:
        return clock.now(session)


def test_the_auto_plan_at_submit_is_timed_on_the_database_clock(
    engine: Engine, stored_run: SubmitPlan
) -> None:
    """Issue 47: the plan at submit read the submitting host's clock. With the deadline 20 min
    away on the database's clock, flex fits; seen 25 min later (a host that far ahead, or the
    database's clock moved), the deadline is gone and only the standard tier is left. The plan
    follows the database's clock, whatever the host's says."""
    settings = AUTO.model_copy(
        update={"run_deadline": (_database_now(engine) + timedelta(minutes=20)).isoformat()}
    )
    assert decide(engine, settings, stored_run).extract_tier == "flex"
    with clock.moved(25 * 60):
        late = decide(engine, settings, stored_run)
    assert (late.mode, late.extract_tier) == ("sync", "sync"), late.reason


def test_a_time_of_day_fixed_at_the_start_stays_that_instant_however_long_storing_takes(
    engine: Engine, stored_run: SubmitPlan
) -> None:
    """Issue 47: an `HH:MM` deadline was parsed again after the files were stored; a storing
    that ran past it moved the deadline 24 h later. Fixed once at the submit's start (on the
    database's clock), it is the same instant when the mode is chosen two minutes later."""
    start = _database_now(engine)
    soon = (start + timedelta(minutes=1)).astimezone()
    settings = AUTO.model_copy(update={"run_deadline": f"{soon:%H:%M:%S}"})
    fixed = fix_deadline(engine, settings)
    with clock.moved(120):  # storing took two minutes: past the time of day
        decide(engine, fixed, stored_run)
    with session_scope(engine) as session:
        run = session.get(Run, stored_run.run_id)
        assert run is not None and run.deadline is not None
        kept = aware(run.deadline)
    assert kept == soon.replace(microsecond=0), f"the deadline moved from {soon} to {kept}"


@pytest.mark.parametrize("source", ["--deadline", "PIPELINE_RUN_DEADLINE"])
def test_a_deadline_already_past_is_refused_naming_who_gave_it(source: str) -> None:
    now = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
    assert fixed_deadline("06:00", now, source) > now, "a time of day is the next one: never past"
    with pytest.raises(ConfigError) as refused:
        fixed_deadline("2026-12-06T08:59:00+00:00", now, source)
    said = str(refused.value)
    assert (
        said.startswith(f"{source} 2026-12-06T08:59:00+00:00 is already past")
        and f"leave {source} out" in said
    )


def test_a_flex_call_gives_way_on_the_one_clock_not_its_host_s(redis_url: str) -> None:
    """Issue 47: the flex-to-standard switch compared `standard_from` with the worker's own
    clock. It reads Redis TIME (the limiter's clock, whose seam the test moves): ten minutes
    before `standard_from` a call goes at flex, and once Redis's clock is past it, at the
    standard tier, while this host's clock has not moved."""
    config = SimConfig(p50_s=0, p95_s=0, seed=4)
    with SimServer(config) as sim:
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            llm_base_url=sim.base_url,
            llm_model="sim-1",
            redis_url=redis_url,
        )
        limiter = RedisLimiter.from_settings(settings, pool_size=1)
        assert limiter is not None
        client = LLMClient(settings, pool_size=1, limiter=limiter)
        standard_from = ratelimit_clock.now_ms(limiter.client.time()) / 1000 + 600
        records: list[CallRecord] = []

        def ask() -> None:
            client.structured(
                extract_messages("Item 7. Revenue was $12.5 million in fiscal 2023.", 0, 1),
                FilingExtraction,
                stage="extract",
                max_tokens=400,
                sink=records.append,
                service_tier="flex",
                standard_from=standard_from,
            )

        try:
            ask()
            with ratelimit_clock.moved(601):
                ask()
        finally:
            client.close()
            limiter.client.close()
    assert [r.mode for r in records if r.status == "ok"] == ["flex", "sync"], records
