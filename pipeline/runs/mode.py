"""A run's mode (sync, flex or batch), chosen at submit from PIPELINE_LLM_MODE and the deadline, and
the synchronous path's time estimate that both the choice and the batch path's cutover use.

Light on imports: the producer loads it to record the mode before it sends anything.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pipeline.core.deadline import fixed_deadline, parse_deadline
from pipeline.core.settings import Settings, get_settings
from pipeline.ingest.producer import SubmitPlan
from pipeline.runs.tiers import TierPlan, plan_auto
from pipeline.storage import clock, run_state
from pipeline.storage.db import session_scope

if TYPE_CHECKING:
    from sqlalchemy import Engine

ASSUMED_RPM = 500
"""Requests a minute assumed for the synchronous path when no limit is configured or learned."""
REPORT_CALLS_PER_DOCUMENT = 1
"""Compressions: one call per document after its extraction."""


SENT_AT_ONCE = ("sync", "flex")
"""Modes whose documents go to the workers as they are stored (batch mode sends one file)."""


def choose_mode(
    settings: Settings, deadline: datetime | None, sync_estimate_s: float, now: datetime
) -> TierPlan:
    """What the run sends: `sync`, `flex` and `batch` as asked; `auto` by the deadline planner
    over the three tiers (`pipeline.runs.tiers`)."""
    asked = settings.llm_mode
    if asked == "auto":
        return plan_auto(settings, deadline, sync_estimate_s, now)
    return TierPlan(asked, _taken_as_asked(settings), "flex" if asked == "flex" else None)


def _taken_as_asked(settings: Settings) -> str:
    """Why a sync or batch mode was taken: the default, or who asked for it. A setting read from
    the environment or .env is among the fields the process's own settings were built with;
    `--mode` is applied on a copy of them (`pipeline.cli.submit.with_mode`)."""
    mode = settings.llm_mode
    if "llm_mode" not in settings.model_fields_set:
        return "default: neither --mode nor PIPELINE_LLM_MODE was given"
    from_environment = get_settings()
    if "llm_mode" in from_environment.model_fields_set and from_environment.llm_mode == mode:
        return f"asked for: PIPELINE_LLM_MODE={mode}"
    return f"asked for: --mode {mode}"


def sync_estimate_s(calls: int, tokens: int, rpm: int, tpm: int, window_s: float = 60.0) -> float:
    """How long the synchronous path needs for `calls` calls of `tokens` tokens in all at these
    limits, counted per `window_s` (PIPELINE_RATE_LIMIT_WINDOW_S; none: ASSUMED_RPM a minute)."""
    if not rpm and not tpm:
        rpm, window_s = ASSUMED_RPM, 60.0
    by_requests = calls / rpm * window_s if rpm else 0.0
    by_tokens = tokens / tpm * window_s if tpm else 0.0
    return max(by_requests, by_tokens)


def work_estimate(settings: Settings, chunks: int, chunk_tokens: int, documents: int) -> tuple[int, int]:
    """(calls, tokens) of extracting `chunks` chunks of `chunk_tokens` text tokens in all, and
    the report of `documents` documents."""
    calls = chunks + documents * REPORT_CALLS_PER_DOCUMENT + 1
    return calls, chunk_tokens + calls * (settings.extract_max_tokens + PROMPT_OVERHEAD_TOKENS)


PROMPT_OVERHEAD_TOKENS = 400
"""The instructions and schema around a chunk's text, roughly."""


def fix_deadline(engine: Engine, settings: Settings, source: str = "PIPELINE_RUN_DEADLINE") -> Settings:
    """`settings` with the run's deadline (PIPELINE_RUN_DEADLINE, or `--deadline` as `source`
    names it) fixed as the instant it names now, on the database's clock: called once at the
    start of a submit, before its files are stored, so that "06:00" given at 05:59 stays this
    morning's however long storing takes. Raises ConfigError when that instant is past."""
    if not settings.run_deadline:
        return settings
    with session_scope(engine) as session:
        now = clock.now(session)
    moment = fixed_deadline(settings.run_deadline, now, source)
    return settings.model_copy(update={"run_deadline": moment.isoformat()})


def decide(
    engine: Engine,
    settings: Settings,
    plan: SubmitPlan,
    now: datetime | None = None,
    sync_s: float | None = None,
) -> TierPlan:
    """Choose the stored run's mode (`PIPELINE_LLM_MODE`, `PIPELINE_RUN_DEADLINE`) and record it
    on the run with its reason, deadline and tiers. `sync_s` is the synchronous path's time
    as the estimate kept at submit gives it (history-aware); without it, the limits' bound.
    Timed on the database's clock (a submitting host's may be minutes off), against the deadline
    `fix_deadline` fixed at the submit's start."""
    if now is None:
        with session_scope(engine) as session:
            now = clock.now(session)
    deadline = parse_deadline(settings.run_deadline, now) if settings.run_deadline else None
    estimate = sync_s
    if estimate is None:
        chunks = sum(plan.chunk_counts.values())
        calls, tokens = work_estimate(settings, chunks, plan.tokens, plan.submitted)
        estimate = sync_estimate_s(
            calls, tokens, settings.rate_limit_rpm, settings.rate_limit_tpm, settings.rate_limit_window_s
        )
    choice = (
        choose_mode(settings, deadline, estimate, now)
        if plan.submitted
        else TierPlan("sync", "no documents", None)
    )
    if choice.mode == "batch" and plan.early_ids:
        choice = TierPlan("sync", f"{choice.reason}; but the run started early, synchronously", None)
    with session_scope(engine) as session:
        run_state.set_mode(
            session,
            plan.run_id,
            choice.mode,
            choice.reason,
            deadline,
            (choice.extract_tier, choice.standard_from),
        )
    return choice
