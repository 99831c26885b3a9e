"""The deadline planner over three tiers: `--mode auto` with a deadline.

The same model is sold at three tiers: the standard one (synchronous, full price), flex
processing (synchronous, slower and sometimes refused for want of capacity, at Batch prices)
and the Batch API (half price, within 24 hours). The rule, from the cheapest up:

- **batch for what can wait.** The run starts in batches when the deadline leaves
  PIPELINE_BATCH_MIN_ROOM_S beyond what flex would need for all of it.
- **flex for what must start sooner.** Once the deadline is as close as what flex needs for
  what the batches have not answered (the synchronous estimate x PIPELINE_FLEX_SLOWDOWN x
  SAFETY, plus PIPELINE_BATCH_DEADLINE_MARGIN_S), the batches are cancelled (the lines they
  completed are kept) and the rest goes at flex. A run whose deadline leaves no room for a batch
  starts at flex.
- **sync only for what flex cannot finish in time.** From `standard_from` (the deadline less
  what the standard tier needs for the same work, stretched the same way) a call still
  unanswered goes at the standard tier, and a flex refusal is not waited out past it. Where
  flex cannot make the deadline even at the start, the run goes at the standard tier.

The plan is made at submit, made again at the batch path's cutover from what is left and the
limits in force then, and each call checks `standard_from` again: flex that refuses or answers
slower than assumed hands what is left to the standard tier in time.

Each document records the tier that answered it (the dearest its chunks used) and why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pipeline.core.deadline import format_duration, format_time
from pipeline.core.settings import Settings
from pipeline.storage import tiers as tier_rows
from pipeline.storage.db import session_scope
from pipeline.storage.tiers import RunPlan

if TYPE_CHECKING:
    from sqlalchemy import Engine

SAFETY = 1.25
"""An estimate of the time a tier needs is stretched by this before the deadline is met with it."""
LATE_CUTOVER = 0.1
"""A cutover handing over to flex is planned this share of flex's need early, beyond a poll: on
a loaded machine its poll comes late, and the plan it then makes must still find flex in time
(a 7 s need met with 7 s left went to the standard tier)."""
TIERS = ("batch", "flex", "sync")
"""From the cheapest up; a document's tier is the dearest its answered calls used."""


def tiers_line(counts: dict[str, int]) -> str:
    """Documents per tier, the cheapest first: "3 reused, 12 batch, 30 flex, 2 sync"."""
    order = ("reused", *TIERS)
    shown = sorted(counts, key=lambda t: order.index(t) if t in order else len(order))
    return ", ".join(f"{counts[t]:,} {t}" for t in shown)


@dataclass(frozen=True)
class TierPlan:
    """What the run does next and why."""

    mode: str
    """The run's path: batch (batches first), flex or sync (its documents to the workers now)."""
    reason: str
    extract_tier: str | None
    """The tier its synchronous extract calls go at: flex or sync (None: as the mode says)."""
    standard_from: datetime | None = None
    """From when flex gives way to the standard tier (None: never)."""


def flex_need_s(settings: Settings, sync_s: float) -> float:
    """What flex needs before the deadline for work the standard tier does in `sync_s`."""
    return sync_s * settings.flex_slowdown * SAFETY + settings.batch_deadline_margin_s


def standard_need_s(settings: Settings, sync_s: float) -> float:
    """What the standard tier needs before the deadline for work it does in `sync_s`."""
    return sync_s * SAFETY + settings.batch_deadline_margin_s


def plan_auto(settings: Settings, deadline: datetime | None, sync_s: float, now: datetime) -> TierPlan:
    """Where an auto run starts: batch when the deadline can wait for one, else flex when flex
    finishes in time, else the standard tier. Without a deadline the price decides: batch."""
    if deadline is None:
        return TierPlan("batch", "auto: no deadline, so the price decides (batch costs half)", None)
    left = (deadline - now).total_seconds()
    flex_s = flex_need_s(settings, sync_s)
    room = left - flex_s
    if room >= settings.batch_min_room_s:
        return TierPlan(
            "batch",
            f"auto: the deadline leaves {format_duration(room)} beyond the {format_duration(flex_s)} "
            f"flex needs for all of it (a batch needs {format_duration(settings.batch_min_room_s)}): "
            "batch first, flex for what the batches have not answered when only that time is left",
            "flex",
        )
    return plan_handover(settings, deadline, sync_s, now, "auto: no room for a batch before the deadline")


def plan_handover(settings: Settings, deadline: datetime, sync_s: float, now: datetime, why: str) -> TierPlan:
    """The tier for work the standard tier does in `sync_s`, sent now: flex when it finishes
    before the deadline (and the standard tier from the moment only it still would), else the
    standard tier. `why` says what brought the plan about (no room for a batch, a cutover)."""
    left = (deadline - now).total_seconds()
    flex_s = flex_need_s(settings, sync_s)
    standard_from = deadline - timedelta(seconds=standard_need_s(settings, sync_s))
    if flex_s <= left:
        return TierPlan(
            "flex",
            f"{why}; flex needs about {format_duration(flex_s)} of the {format_duration(left)} left, "
            f"and what it has not answered by {format_time(standard_from)} goes at the standard tier",
            "flex",
            standard_from,
        )
    return TierPlan(
        "sync",
        f"{why}; flex would need about {format_duration(flex_s)}, more than the "
        f"{format_duration(max(0.0, left))} left: the standard tier",
        "sync",
    )


def document_tier(modes: Iterable[str], run: RunPlan) -> tuple[str, str]:
    """A document's tier (the dearest its answered extract calls used) and why, from the modes
    of those calls and its run's plan."""
    used = set(modes) & set(TIERS)
    if not used:
        return "reused", "every chunk's answer came from an earlier run of the same text"
    tier = next(t for t in reversed(TIERS) if t in used)
    plan = run.reason or run.mode
    if tier == "batch":
        return tier, "the run's batches answered every chunk"
    if tier == "flex":
        part = (
            "the batches answered part of it before the cutover, flex the rest; " if "batch" in used else ""
        )
        return tier, part + plan
    if run.extract_tier == "flex" and run.standard_from is not None:
        return tier, (
            f"flex had not answered all of it by {format_time(run.standard_from)} (refused, or slower "
            f"than planned): the standard tier finished it to make the deadline; {plan}"
        )
    if run.mode == "batch":
        return tier, f"the batches had not answered all of it by the cutover; {plan}"
    return tier, plan


def record_document_tiers(engine: Engine, run_id: str) -> None:
    """Store, on each extracted document of the run, the tier that answered it and why (once
    every document is final: finalize does it before the report)."""
    with session_scope(engine) as session:
        run = tier_rows.run_plan(session, run_id)
        if run is None:
            return
        modes = tier_rows.extracted_modes(session, run_id)
        tier_rows.set_document_tiers(session, {doc: document_tier(used, run) for doc, used in modes.items()})
