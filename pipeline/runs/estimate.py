"""What a run will cost and take before anything is sent: `pipeline plan` and `submit --dry-run`.

The files are read and chunked as submit reads them (`producer.survey`); no LLM call is made.
Each mode's figures are the same work priced and timed differently:

- calls: one extract call per chunk, one compression per document, the synthesis calls;
- tokens: a chunk's text at 4 characters a token plus its prompt's instructions; answers at
  `PIPELINE_EXTRACT_MAX_TOKENS` x ASSUMED_ANSWER_SHARE;
- time (sync): the requests and tokens a minute allow (configured, or learned from the
  provider's headers), and no faster than the calls can be made one after another by the
  slots that make them;
- batch: the extractions at batch prices (the report's calls stay at the standard tier's), and
  the provider's completion window (24 h) or what the last batches took; flex: the same prices,
  at the sync path's time x PIPELINE_FLEX_SLOWDOWN;
- auto: the tier the deadline planner starts at (`pipeline.runs.tiers`).

Where the database holds completed runs of the same model, their usage replaces the assumed
figures: tokens per text token and per answer, calls per chunk and per document, and the time
they took per call. The plan says which figures came from where.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipeline.core.cost import Price, price_of
from pipeline.core.deadline import parse_deadline
from pipeline.core.settings import Settings
from pipeline.ingest.producer import SubmitPlan
from pipeline.runs import cache_estimate
from pipeline.runs.mode import choose_mode
from pipeline.storage import clock
from pipeline.storage.db import session_scope
from pipeline.storage.runs import get_run
from pipeline.storage.usage import (
    Actual,
    RecentUsage,
    StageUsage,
    recent_batch_seconds,
    recent_usage,
    store_estimate,
)

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)

ASSUMED_ANSWER_SHARE = 0.3
"""An answer's share of its `max_tokens`, without history (a 10-K chunk's JSON is a few hundred
tokens of the 1,500 allowed)."""
ASSUMED_REPORT_CALL = StageUsage(calls=1, prompt_tokens=600, completion_tokens=250, latency_ms=2000)
"""One compression or synthesis call, without history."""
ASSUMED_LATENCY_S = 2.0
"""Seconds an extract call takes, without history."""
ASSUMED_RPM = 500
"""Requests a minute where no limit is configured or learned (as `pipeline.runs.mode`)."""
BATCH_WINDOW_S = 24 * 3600.0
"""The Batch API's completion window: what a batch may take, where no batch has told us better."""


@dataclass(frozen=True)
class Limits:
    rpm: int
    tpm: int
    source: str
    slots: int
    """Calls made at once: live workers x PIPELINE_WORKER_CONCURRENCY (or one worker's)."""
    window_s: float = 60.0
    """What `rpm` and `tpm` are counted over (PIPELINE_RATE_LIMIT_WINDOW_S)."""


@dataclass(frozen=True)
class Work:
    """The run's calls and tokens, the same in every mode."""

    documents: int
    chunks: int
    text_tokens: int
    calls: int
    report_calls: int
    """Of `calls`, the compressions and syntheses (synchronous in every mode)."""
    report_tokens: tuple[int, int]
    """Of the tokens in and out, the report calls' (at the standard tier's price in every mode)."""
    input_tokens: int
    output_tokens: int
    reserved_tokens: int
    """Prompt tokens plus each call's `max_tokens`: what the tokens-a-minute limit counts."""
    seconds_per_call: float
    """Wall seconds per call the last runs took (0: no history)."""
    sources: dict[str, str] = field(default_factory=dict)
    cached_tokens: int = 0
    """Of the extract calls' input tokens, those the provider is estimated to serve from its
    prompt cache (`pipeline.runs.cache_estimate`), priced at the cached-input price."""


@dataclass(frozen=True)
class ModeEstimate:
    mode: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    """None: the model has no price (PIPELINE_LLM_PRICES)."""
    seconds: float
    meets_deadline: bool | None
    """None: no deadline."""
    note: str = ""
    cached_tokens: int = 0
    """Of `input_tokens`, those estimated to be served from the provider's prompt cache."""


@dataclass(frozen=True)
class Plan:
    work: Work
    modes: list[ModeEstimate]
    chosen: ModeEstimate
    """The mode the run would be sent in (PIPELINE_LLM_MODE, `--mode`; auto's choice)."""
    reason: str
    deadline: datetime | None
    budget_usd: float | None
    rejected: list[tuple[str, str]]
    limits: Limits

    @property
    def over_budget(self) -> bool:
        cost = self.chosen.cost_usd
        return self.budget_usd is not None and cost is not None and cost > self.budget_usd

    def stored(self) -> dict[str, Any]:
        """What the run keeps of it (`runs.estimate`)."""
        keep = ("calls", "input_tokens", "cached_tokens", "output_tokens", "cost_usd", "seconds")
        return {
            "modes": {m.mode: {k: getattr(m, k) for k in keep} for m in self.modes},
            "sources": self.work.sources,
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "documents": self.work.documents,
            "chunks": self.work.chunks,
            "rejected": [{"path": p, "reason": r} for p, r in self.rejected],
            "limits": asdict(self.limits),
            "sources": self.work.sources,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "budget_usd": self.budget_usd,
            "over_budget": self.over_budget,
            "modes": [asdict(m) for m in self.modes],
            "chosen": {"mode": self.chosen.mode, "reason": self.reason},
        }


def reusing(engine: Engine, settings: Settings, survey: SubmitPlan) -> SubmitPlan:
    """The survey without the chunks an earlier run answered for the same text (same span,
    prompt version and a model still in use): a run that reuses answers (not `--fresh`, the
    filing schema) asks no call for them. Their count is kept in `reused_chunks`."""
    from pipeline.storage.usage import answered_spans

    models = [settings.llm_model] + ([settings.llm_fallback_model] if settings.llm_fallback_model else [])
    with session_scope(engine) as session:
        answered = answered_spans(
            session, [sha for sha, _ in survey.spans.values()], models, settings.prompt_version()
        )
    if not answered:
        return survey
    counts, tokens, reused = dict(survey.chunk_counts), survey.tokens, 0
    for number, (sha, spans) in survey.spans.items():
        for start, end, span_tokens in spans:
            if (sha, start, end) in answered:
                counts[number] -= 1
                tokens -= span_tokens
                reused += 1
    return replace(survey, chunk_counts=counts, tokens=tokens, reused_chunks=reused)


def work_of(settings: Settings, survey: SubmitPlan, usage: RecentUsage, schema: str | None = None) -> Work:
    """The run's calls and tokens: the last runs' ratios where there are any, else the assumed;
    the cached tokens from the layout (`cache_estimate`)."""
    documents, chunks, text = survey.submitted, sum(survey.chunk_counts.values()), survey.tokens
    sources: dict[str, str] = {}
    extract = usage.stages.get("extract")
    if extract and usage.chunks and usage.text_tokens:
        runs = f"the last {usage.runs} run{'s' if usage.runs > 1 else ''}"
        extract_calls = round(chunks * extract.calls / usage.chunks)
        extract_in = round(text * extract.prompt_tokens / usage.text_tokens)
        extract_out = round(extract_calls * extract.completion_tokens / extract.calls)
        sources["extract"] = f"{runs} of {settings.llm_model}"
    else:
        extract_calls = chunks
        extract_in = text + chunks * cache_estimate.prompt_overhead_tokens(settings, survey, schema)
        extract_out = round(chunks * settings.extract_max_tokens * ASSUMED_ANSWER_SHARE)
        sources["extract"] = "assumed: no completed run of this model to learn from"
    calls, tokens_in, tokens_out = extract_calls, extract_in, extract_out
    for stage, per_run in (("compress", False), ("synthesize", True)):
        seen = usage.stages.get(stage)
        if seen and seen.calls and usage.documents:
            # Syntheses grow with the documents too (partial ones, level by level), from the
            # final call and its copies up: a 3-filing run after 20-filing ones makes fewer.
            stage_calls = round(documents * seen.calls / usage.documents)
            stage_calls = max(stage_calls, settings.synthesis_copies) if per_run else stage_calls
            sources[stage] = "the last runs"
        else:
            seen = ASSUMED_REPORT_CALL
            stage_calls = settings.synthesis_copies if per_run else documents
            sources[stage] = "assumed"
        stage_calls = stage_calls if documents else 0
        calls += stage_calls
        tokens_in += round(stage_calls * seen.prompt_tokens / seen.calls)
        tokens_out += round(stage_calls * seen.completion_tokens / seen.calls)
    if survey.reused_chunks:
        sources["reused"] = (
            f"{survey.reused_chunks} chunks answered by earlier runs of the same text: no call"
        )
    history_calls = sum(s.calls for s in usage.stages.values())
    return Work(
        documents=documents,
        chunks=chunks,
        text_tokens=text,
        calls=calls,
        report_calls=calls - extract_calls,
        report_tokens=(tokens_in - extract_in, tokens_out - extract_out),
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        reserved_tokens=tokens_in + tokens_out - extract_out + extract_calls * settings.extract_max_tokens,
        seconds_per_call=usage.seconds / history_calls if history_calls else 0.0,
        sources=sources,
        cached_tokens=min(extract_in, cache_estimate.cached_tokens(settings, survey, schema)),
    )


def sync_seconds(work: Work, limits: Limits) -> float:
    """The synchronous path's wall time: the slower of what the limits allow and what the
    slots can make (the last runs' seconds per call, else ASSUMED_LATENCY_S per call a slot).
    With no limit configured or learned, ASSUMED_RPM stands in only where there is no history."""
    assumed = 0 if limits.tpm or work.seconds_per_call else ASSUMED_RPM  # history knows better
    rpm = limits.rpm or assumed
    window_s = limits.window_s if limits.rpm or limits.tpm else 60.0  # ASSUMED_RPM is a minute's
    by_requests = work.calls / rpm * window_s if rpm else 0.0
    by_tokens = work.reserved_tokens / limits.tpm * window_s if limits.tpm else 0.0
    if work.seconds_per_call:
        by_slots = work.calls * work.seconds_per_call
    else:
        by_slots = work.calls * ASSUMED_LATENCY_S / max(1, limits.slots)
    return max(by_requests, by_tokens, by_slots)


def plan_run(
    settings: Settings,
    survey: SubmitPlan,
    usage: RecentUsage,
    limits: Limits,
    now: datetime,
    deadline: datetime | None,
    batch_seconds: float | None = None,
    schema: str | None = None,
) -> Plan:
    """Every mode's estimate of the surveyed work, and the one the run would be sent in."""
    work = work_of(settings, survey, usage, schema)
    sync_s = sync_seconds(work, limits)
    report_s = sync_seconds(_report_part(work), limits) if work.documents else 0.0
    model = settings.llm_model
    sync_price, batch_price = price_of(settings.prices(), model), price_of(settings.batch_prices(), model)
    left = (deadline - now).total_seconds() if deadline else None

    def row(mode: str, price: Price | None, seconds: float, note: str) -> ModeEstimate:
        # The extractions at the mode's price, the report's calls at the standard tier's.
        cost = None
        if price and sync_price:
            report_in, report_out = work.report_tokens
            extract = price.of(
                work.input_tokens - report_in, work.output_tokens - report_out, work.cached_tokens
            )
            cost = extract + sync_price.of(report_in, report_out)
        meets = None if left is None else seconds <= left
        return ModeEstimate(
            mode,
            work.calls,
            work.input_tokens,
            work.output_tokens,
            cost,
            seconds,
            meets,
            note,
            work.cached_tokens,
        )

    batch_s = (batch_seconds if batch_seconds is not None else BATCH_WINDOW_S) + report_s
    batch_note = "the last batches' time" if batch_seconds is not None else "up to the provider's 24 h window"
    rows = {
        "sync": row("sync", sync_price, sync_s, work.sources["extract"]),
        "flex": row(
            "flex",
            batch_price,
            sync_s * settings.flex_slowdown,
            f"flex processing: batch prices, {settings.flex_slowdown:g}x slower assumed "
            "(PIPELINE_FLEX_SLOWDOWN)",
        ),
        "batch": row("batch", batch_price, batch_s, batch_note),
    }
    choice = choose_mode(settings, deadline, sync_s, now)
    auto = choose_mode(settings.model_copy(update={"llm_mode": "auto"}), deadline, sync_s, now)
    rows["auto"] = _auto_row(rows, auto.mode, f"sends {auto.mode}: {auto.reason}", left)
    chosen = rows[choice.mode] if settings.llm_mode != "auto" else rows["auto"]
    return Plan(
        work=work,
        modes=[rows[m] for m in ("sync", "flex", "batch", "auto")],
        chosen=chosen,
        reason=choice.reason,
        deadline=deadline,
        budget_usd=settings.run_budget_usd,
        rejected=survey.rejected,
        limits=limits,
    )


def _auto_row(rows: dict[str, ModeEstimate], mode: str, note: str, left: float | None) -> ModeEstimate:
    """Auto's figures: the tier the planner starts at. A batch that would end after the deadline
    is cut over to flex in time for it (`pipeline.runs.tiers`): what it has not answered by
    then (its lines done evenly over its time: the estimate's assumption) goes at flex, at the
    same prices, and the deadline is met."""
    chosen = rows[mode]
    if mode != "batch" or left is None or chosen.seconds <= left:
        return replace(chosen, mode="auto", note=note)
    flex = rows["flex"]
    done = max(0.0, min(1.0, (left - flex.seconds) / chosen.seconds))
    cost = None
    if chosen.cost_usd is not None and flex.cost_usd is not None:
        cost = done * chosen.cost_usd + (1 - done) * flex.cost_usd
    note = f"{note}; about {done:.0%} by batch before the cutover, the rest at flex"
    return replace(chosen, mode="auto", cost_usd=cost, seconds=left, meets_deadline=True, note=note)


def _report_part(work: Work) -> Work:
    """The report's calls alone (compressions and synthesis: sync in every mode)."""
    return Work(
        work.documents, 0, 0, work.report_calls, work.report_calls, (0, 0), 0, 0, 0, work.seconds_per_call
    )


def limits_for(settings: Settings) -> Limits:
    """The limits a run would meet now: the configured ones, or what the provider's headers
    told the limiter (in Redis); and the slots of the live workers (one worker's without a
    broker or a live worker)."""
    rpm, tpm = settings.rate_limit_rpm, settings.rate_limit_tpm
    source = "configured" if rpm or tpm else f"none configured: {ASSUMED_RPM} requests a minute assumed"
    workers = 0
    if settings.redis_url:
        try:
            rpm, tpm, source, workers = _from_redis(settings, rpm, tpm, source)
        except Exception as exc:  # the broker is down: the configured figures stand, said so
            source += f" (the broker did not answer: {type(exc).__name__})"
    slots = max(1, workers) * settings.worker_concurrency
    return Limits(rpm, tpm, source, slots, settings.rate_limit_window_s)


def _from_redis(settings: Settings, rpm: int, tpm: int, source: str) -> tuple[int, int, str, int]:
    from pipeline.llm.ratelimit import RedisLimiter, Scope
    from pipeline.recovery.heartbeat import live_workers

    limiter = RedisLimiter.from_settings(settings, pool_size=1)
    if limiter is None:
        return rpm, tpm, source, 0
    workers = len(live_workers(limiter.client))
    if settings.llm_base_url:
        view = limiter.view(Scope(settings.llm_base_url, settings.llm_model, 0))
        if view.learned_rpm or view.learned_tpm:
            rpm, tpm = view.rpm_in_force, view.tpm_in_force
            source = "learned from the provider's x-ratelimit headers"
    return rpm, tpm, source, workers


def record_estimate(engine: Engine, settings: Settings, submitted: SubmitPlan) -> Plan:
    """Estimate the stored run as `pipeline plan` would have, and keep the figures on it."""
    with session_scope(engine) as session:
        now = clock.now(session)  # the one clock, which the mode's choice is timed on too
        run = get_run(session, submitted.run_id)
        reuse = run is not None and run.reuse_answers and not run.schema
    deadline = parse_deadline(settings.run_deadline, now) if settings.run_deadline else None
    usage, batch_seconds = history(engine, settings)
    if reuse:
        submitted = reusing(engine, settings, submitted)
    schema = run.schema if run is not None else None
    plan = plan_run(settings, submitted, usage, limits_for(settings), now, deadline, batch_seconds, schema)
    with session_scope(engine) as session:
        store_estimate(session, submitted.run_id, plan.stored())
    return plan


def keep_estimate(engine: Engine, settings: Settings, submitted: SubmitPlan) -> float | None:
    """`record_estimate` for a run about to start (submit, the nightly inbox); the synchronous
    path's estimated seconds, which the mode's choice uses. A failure to make one is logged and
    never stops the run (the estimate is a report, not a gate): None then."""
    try:
        plan = record_estimate(engine, settings, submitted)
    except Exception as exc:
        log.warning("run %s: no estimate stored: %s", submitted.run_id, exc)
        return None
    return next(m.seconds for m in plan.modes if m.mode == "sync")


def history(engine: Engine, settings: Settings) -> tuple[RecentUsage, float | None]:
    """The last runs' usage of the model in the prompt layout a run submitted now takes
    (PIPELINE_PLAN_HISTORY_RUNS), and the last batches' time."""
    with session_scope(engine) as session:
        usage = recent_usage(
            session, settings.llm_model, settings.plan_history_runs, settings.prompt_version()
        )
        return usage, recent_batch_seconds(session)


def accuracy(estimate: dict[str, Any] | None, mode: str, actual: Actual) -> dict[str, Any] | None:
    """The run's mode's estimate beside what the run used, each with its error (actual over
    estimate, less one); None when the run has no estimate."""
    figures = (estimate or {}).get("modes", {}).get(mode)
    if not figures:
        return None
    pairs = {
        "calls": (figures["calls"], actual.calls),
        "tokens": (figures["input_tokens"] + figures["output_tokens"], actual.tokens),
        "cached_tokens": (figures.get("cached_tokens"), actual.cached_tokens),
        "cost_usd": (figures["cost_usd"], actual.cost_usd),
        "seconds": (figures["seconds"], actual.seconds),
    }
    return {
        name: {"estimate": est, "actual": act, "error": _error(est, act)}
        for name, (est, act) in pairs.items()
    }


def _error(estimate: float | None, actual: float | None) -> float | None:
    if estimate is None or actual is None or not estimate:
        return None
    return round(actual / estimate - 1, 4)
