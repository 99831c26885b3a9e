"""A run's mode (sync or batch), chosen at submit from PIPELINE_LLM_MODE and the deadline, and
the synchronous path's time estimate that both the choice and the batch path's cutover use.

Light on imports: the producer loads it to record the mode before it sends anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pipeline.core.deadline import parse_deadline
from pipeline.core.settings import Settings, get_settings
from pipeline.ingest.producer import SubmitPlan
from pipeline.storage import run_state
from pipeline.storage.db import session_scope

if TYPE_CHECKING:
    from sqlalchemy import Engine

SAFETY = 1.25
"""The synchronous path's estimate is stretched by this before the deadline is met with it."""
ASSUMED_RPM = 500
"""Requests a minute assumed for the synchronous path when no limit is configured or learned."""
REPORT_CALLS_PER_DOCUMENT = 1
"""Compressions: one call per document after its extraction."""


SENT_AT_ONCE = ("sync", "flex")
"""Modes whose documents go to the workers as they are stored (batch mode sends one file)."""


@dataclass(frozen=True)
class ModeChoice:
    mode: str  # sync | flex | batch
    reason: str


def choose_mode(
    settings: Settings, deadline: datetime | None, sync_estimate_s: float, now: datetime
) -> ModeChoice:
    """What `--mode auto` sends: batch when the deadline leaves room for a batch beyond what the
    synchronous path needs, sync otherwise. `sync`/`batch` are taken as asked."""
    asked = settings.llm_mode
    if asked in ("sync", "flex", "batch"):
        return ModeChoice(asked, _taken_as_asked(settings))
    if deadline is None:
        return ModeChoice("batch", "auto: no deadline, so the price decides (batch costs half)")
    room = (deadline - now).total_seconds() - sync_estimate_s * SAFETY - settings.batch_deadline_margin_s
    need = settings.batch_min_room_s
    if room >= need:
        return ModeChoice(
            "batch",
            f"auto: the deadline leaves {format_duration(room)} beyond the {format_duration(sync_estimate_s)} "
            f"the synchronous path needs (a batch needs at least {format_duration(need)})",
        )
    return ModeChoice(
        "sync",
        f"auto: the deadline leaves {format_duration(max(0.0, room))} beyond the {format_duration(sync_estimate_s)} "
        f"the synchronous path needs, less than the {format_duration(need)} a batch needs",
    )


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


def sync_estimate_s(calls: int, tokens: int, rpm: int, tpm: int) -> float:
    """How long the synchronous path needs for `calls` calls of `tokens` tokens in all at these
    limits (none: ASSUMED_RPM)."""
    if not rpm and not tpm:
        rpm = ASSUMED_RPM
    by_requests = calls / rpm * 60 if rpm else 0.0
    by_tokens = tokens / tpm * 60 if tpm else 0.0
    return max(by_requests, by_tokens)


def work_estimate(settings: Settings, chunks: int, chunk_tokens: int, documents: int) -> tuple[int, int]:
    """(calls, tokens) of extracting `chunks` chunks of `chunk_tokens` text tokens in all, and
    the report of `documents` documents."""
    calls = chunks + documents * REPORT_CALLS_PER_DOCUMENT + 1
    return calls, chunk_tokens + calls * (settings.extract_max_tokens + PROMPT_OVERHEAD_TOKENS)


PROMPT_OVERHEAD_TOKENS = 400
"""The instructions and schema around a chunk's text, roughly."""


def decide(engine: Engine, settings: Settings, plan: SubmitPlan, now: datetime | None = None) -> ModeChoice:
    """Choose the stored run's mode (`PIPELINE_LLM_MODE`, `PIPELINE_RUN_DEADLINE`) and record it
    on the run with its reason and deadline."""
    now = now or datetime.now(UTC)
    deadline = parse_deadline(settings.run_deadline, now) if settings.run_deadline else None
    chunks = sum(plan.chunk_counts.values())
    calls, tokens = work_estimate(settings, chunks, plan.tokens, plan.submitted)
    estimate = sync_estimate_s(calls, tokens, settings.rate_limit_rpm, settings.rate_limit_tpm)
    choice = (
        choose_mode(settings, deadline, estimate, now)
        if plan.submitted
        else ModeChoice("sync", "no documents")
    )
    if choice.mode == "batch" and plan.early_ids:
        choice = ModeChoice("sync", f"{choice.reason}; but the run started early, synchronously")
    with session_scope(engine) as session:
        run_state.set_mode(session, plan.run_id, choice.mode, choice.reason, deadline)
    return choice


def format_duration(seconds: float) -> str:
    seconds = max(0, math.ceil(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
