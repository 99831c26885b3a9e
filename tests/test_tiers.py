"""The deadline planner over three tiers (`pipeline.runs.tiers`): where an auto run starts, what
the batch path hands over at its cutover, the moment flex gives way to the standard tier, and
each document's tier; then a flex call refused near that moment, through the real openai SDK
against the simulator."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from pipeline.core.settings import Settings
from pipeline.extraction.schemas import FilingExtraction
from pipeline.llm.client import CallRecord, LLMClient
from pipeline.llm.prompts import extract_messages
from pipeline.llm.retry_policy import flex_gives_way
from pipeline.runs.tiers import SAFETY, document_tier, plan_auto, plan_handover, tiers_line
from pipeline.storage.tiers import RunPlan
from pipeline_dev.sim import SimConfig, SimServer

NOW = datetime(2026, 12, 5, 2, 0, tzinfo=UTC)
SETTINGS = Settings(
    _env_file=None,  # type: ignore[call-arg]
    batch_min_room_s=1800,
    batch_deadline_margin_s=300,
    flex_slowdown=2.0,
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
