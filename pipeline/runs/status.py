"""Run progress and totals, read from the database."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipeline.core.settings import Settings, get_settings
from pipeline.extraction.grounding import rate
from pipeline.runs.estimate import accuracy
from pipeline.runs.trust import trust_view
from pipeline.storage import batches as batch_repo
from pipeline.storage import run_state as repo
from pipeline.storage import run_totals, runs
from pipeline.storage import tiers as tier_rows
from pipeline.storage.db import session_scope
from pipeline.storage.llm_calls import call_totals
from pipeline.storage.models import TERMINAL_DOC_STATUSES, Run, aware, utcnow
from pipeline.storage.retention import kept_totals
from pipeline.storage.run_summaries import RunSummary, newest_summaries
from pipeline.storage.usage import Actual

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.llm.structured import ModeStore


@dataclass
class RunStatusView:
    run_id: str
    name: str | None
    status: str
    query: str
    model: str
    simulated: bool
    created_at: str
    finished_at: str | None
    elapsed_s: float
    documents: dict[str, int] = field(default_factory=dict)
    documents_total: int = 0
    documents_done: int = 0
    llm_calls: int = 0
    llm_calls_failed: int = 0
    """Calls that brought no usable answer (counted in llm_calls)."""
    llm_calls_held: int = 0
    """Calls an open circuit held (a provider's outage): never sent, not in llm_calls."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Of `prompt_tokens`, those served from the provider's prompt cache (at the cached price)."""
    has_report: bool = False
    cost_usd: float | None = None
    """Sum over priced calls; None when no call was priced."""
    unpriced_calls: int = 0
    """Calls whose model has no price in PIPELINE_LLM_PRICES: the cost leaves them out."""
    budget_usd: float | None = None
    error: str | None = None
    chunks_total: int = 0
    chunks_done: int = 0
    quotes_total: int = 0
    quotes_grounded: int = 0
    grounding_rate: float | None = None
    """Share of the extracted quotes found in their filing's text."""
    injection_flagged: int = 0
    """Documents holding instruction-like text aimed at a model."""
    reclaimed: dict[str, int] = field(default_factory=dict)
    """Documents live workers took back, by the dead worker they were taken from."""
    mode: str = "sync"
    mode_reason: str | None = None
    deadline: str | None = None
    batch_calls: int = 0
    """Answers at batch prices: from the provider's Batch API, or at the flex tier."""
    batch_cost_usd: float = 0.0
    batch_saved_usd: float = 0.0
    """What the batch calls' tokens would have cost more at synchronous prices."""
    batches: list[dict[str, Any]] = field(default_factory=list)
    """The run's provider batches: id, status, requests, completed, failed."""
    tier_reason: str | None = None
    """The deadline planner's tier for what the batches left, and why (`--mode auto`)."""
    tiers: dict[str, dict[str, int]] = field(default_factory=dict)
    """Extracted documents per tier that answered them (batch, flex, sync, reused), and within
    each tier per reason (set once the run is final)."""
    estimate: dict[str, Any] | None = None
    """The run's mode's estimate at submit beside what it used: calls, tokens, cost_usd and
    seconds, each {estimate, actual, error} (`pipeline.runs.estimate.accuracy`)."""
    confidence: dict[str, Any] = field(default_factory=dict)
    """Fields per confidence band, the escalated ones, and calls and cost per tier of models
    (`pipeline.runs.trust.trust_view`)."""
    pruned_at: str | None = None
    """When `pipeline prune` dropped the run's filing texts, chunks and call rows: its calls,
    tokens, cost and chunks are then those it had before."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class UnknownRun(LookupError):
    pass


def resolve_run_id(engine: Engine, prefix: str | None) -> str:
    """The run whose id starts with `prefix`; the newest run when None."""
    with session_scope(engine) as session:
        if prefix is None:
            newest = runs.newest_run_ids(session, 1)
            if not newest:
                raise UnknownRun("no runs yet")
            return newest[0]
        ids = runs.run_ids_starting(session, prefix, 2)
    if len(ids) != 1:
        raise UnknownRun(f"no run matches {prefix!r}" if not ids else f"{prefix!r} is ambiguous")
    return ids[0]


def run_status(engine: Engine, run_id: str) -> RunStatusView:
    with session_scope(engine) as session:
        run = runs.get_run(session, run_id)
        if run is None:
            raise UnknownRun(f"no run {run_id!r}")
        kept = kept_totals(run.pruned)
        summary = RunSummary(
            run=run,
            calls=kept[0] if kept else call_totals(session, run_id),
            documents=repo.status_counts(session, run_id),
            flagged=run_totals.flagged_count(session, run_id),
            batch=batch_repo.batch_totals(session, run_id),
            # A pruned run's chunk rows are gone: the totals it kept stand.
            chunks=(kept[1], kept[2]) if kept else run_totals.chunk_totals(session, run_id),
            quotes=run_totals.quote_totals(session, run_id),
            has_report=repo.report_exists(session, run_id),
        )
        view = _view(summary)
        view.reclaimed = run_totals.reclaims_by_owner(session, run_id)
        view.tiers = tier_rows.tier_counts(session, run_id)
        view.confidence = trust_view(session, run_id, get_settings())
        view.batches = [
            {
                "batch": row.provider_batch_id or f"(row {row.id}, {row.status})",
                "status": row.status,
                "requests": row.requests,
                "completed": row.completed,
                "failed": row.failed,
            }
            for row in batch_repo.of_run(session, run_id)
        ]
    return view


def _view(summary: RunSummary) -> RunStatusView:
    """The run's view from its totals (the lists and breakdowns `run_status` adds are empty)."""
    run, calls, counts = summary.run, summary.calls, summary.documents
    (quotes, grounded), (chunks, chunks_done) = summary.quotes, summary.chunks
    batch_calls, batch_cost, batch_sync_cost = summary.batch
    end = run.finished_at or utcnow()
    tokens = calls.prompt_tokens + calls.completion_tokens
    return RunStatusView(
        run_id=run.id,
        name=run.name,
        status=run.status,
        query=run.query,
        model=run.model,
        simulated=run.simulated,
        created_at=_iso(run.created_at),
        finished_at=_iso(run.finished_at) if run.finished_at else None,
        elapsed_s=round((aware(end) - aware(run.created_at)).total_seconds(), 3),
        documents=counts,
        documents_total=sum(counts.values()),
        documents_done=sum(n for s, n in counts.items() if s in TERMINAL_DOC_STATUSES),
        llm_calls=calls.calls,
        llm_calls_failed=calls.failed_calls,
        llm_calls_held=calls.held_calls,
        prompt_tokens=calls.prompt_tokens,
        completion_tokens=calls.completion_tokens,
        cached_tokens=calls.cached_tokens,
        has_report=summary.has_report,
        cost_usd=calls.cost_usd,
        unpriced_calls=calls.calls - calls.priced_calls,
        budget_usd=run.budget_usd,
        error=run.error,
        chunks_total=int(chunks),
        chunks_done=int(chunks_done),
        quotes_total=int(quotes),
        quotes_grounded=int(grounded),
        grounding_rate=rate(int(grounded), int(quotes)),
        injection_flagged=summary.flagged,
        mode=run.mode,
        mode_reason=run.mode_reason,
        deadline=_iso(run.deadline) if run.deadline else None,
        batch_calls=batch_calls,
        batch_cost_usd=round(batch_cost, 6),
        batch_saved_usd=round(batch_sync_cost - batch_cost, 6),
        tier_reason=run.tier_reason,
        pruned_at=_iso(run.pruned_at) if run.pruned_at else None,
        estimate=accuracy(
            run.estimate, run.mode, _actual(run, calls.calls, tokens, calls.cost_usd, calls.cached_tokens)
        ),
    )


def _actual(run: Run, calls: int, tokens: int, cost: float | None, cached: int = 0) -> Actual:
    seconds = None
    if run.finished_at is not None:
        seconds = (aware(run.finished_at) - aware(run.started_at or run.created_at)).total_seconds()
    return Actual(calls, tokens, cost or 0.0, seconds, cached)


@dataclass
class DocumentGrounding:
    path: str
    quotes_total: int
    quotes_grounded: int
    grounding_rate: float | None
    revenue_grounded: bool | None
    injection_flag: bool


def document_grounding(
    engine: Engine, run_id: str, *, worth_only: bool = False, limit: int | None = None
) -> tuple[list[DocumentGrounding], int]:
    """Per extracted document: how many of its quotes were found in its text, lowest rate first;
    and how many documents there are. `worth_only` and `limit`: the first of those worth a look
    (`run_totals.grounding_rows`)."""
    with session_scope(engine) as session:
        rows, total = run_totals.grounding_rows(session, run_id, worth_only=worth_only, limit=limit)
    found = [
        DocumentGrounding(path, quotes, grounded, rate(grounded, quotes), revenue, flag)
        for path, quotes, grounded, revenue, flag in rows
    ]
    return found, total


def list_runs(engine: Engine, limit: int = 20, *, detail: bool = False) -> list[RunStatusView]:
    """The `limit` newest runs, newest first, read in one statement for all of them
    (`pipeline.storage.run_summaries`): every figure `run_status` gives but the breakdowns
    (reclaims, tiers, confidence, batches), which `detail` adds, run by run."""
    with session_scope(engine) as session:
        summaries = newest_summaries(session, limit)
    if detail:
        return [run_status(engine, summary.run.id) for summary in summaries]
    return [_view(summary) for summary in summaries]


def _iso(moment: datetime) -> str:
    return aware(moment).isoformat(timespec="seconds")


def limits_source(rpm: int, tpm: int, learned_rpm: int, learned_tpm: int) -> str:
    """Where the limits in force come from, in words for `pipeline status`."""
    configured = bool(rpm or tpm)
    learned = bool(learned_rpm or learned_tpm)
    lowered = (learned_rpm and rpm > learned_rpm) or (learned_tpm and tpm > learned_tpm)
    if lowered:
        return "configured, lowered to the provider's headers"
    if configured and ((learned_rpm and not rpm) or (learned_tpm and not tpm)):
        return "configured and learned from headers"
    if configured:
        return "configured"
    return "learned from headers" if learned else "none"


@dataclass(frozen=True)
class CallOutcomes:
    answered: int
    failed: int
    """Calls that brought no usable answer (any status but ok: unavailable, refused, rate
    limited, invalid): `--wait` shows them apart from progress."""
    last_error: str | None


def call_outcomes(engine: Engine, run_id: str) -> CallOutcomes:
    """The run's LLM calls, answered and failed, counted by `call_totals`'s one query (a failure
    recorded between two counts would look like an answer), and the newest failure's error."""
    with session_scope(engine) as session:
        totals = call_totals(session, run_id)
        error = run_totals.last_call_error(session, run_id) if totals.failed_calls else None
    return CallOutcomes(totals.calls - totals.failed_calls, totals.failed_calls, error)


def _called_models(settings: Settings) -> list[str]:
    """Every model these settings may call: the extract models, the synthesis model, the fallback."""
    models = dict.fromkeys(
        [name for name, _ in settings.extract_models()]
        + [settings.llm_model, settings.llm_fallback_model or ""]
    )
    return [model for model in models if model]


def longest_pause_s(settings: Settings) -> float | None:
    """The longest shared pause (after a provider's 429) in force over the scopes these settings
    call, 0 for none; None when there is no Redis to ask or it does not answer."""
    import redis

    from pipeline.llm.ratelimit import RedisLimiter, Scope

    if not settings.redis_url or not settings.llm_base_url:
        return None
    limiter = RedisLimiter.from_settings(settings, pool_size=1)
    if limiter is None:
        return None
    try:
        return max(
            limiter.paused_for_s(Scope(settings.llm_base_url, model, slot))
            for model in _called_models(settings)
            for slot in range(len(settings.api_keys()))
        )
    except redis.RedisError:
        return None
    finally:
        limiter.client.close()


@dataclass(frozen=True)
class StructuredOutputInUse:
    mode: str
    """The structured-output mode a call to the model sends now."""
    label: str
    """Two or three words: configured, found by auto, auto: never refused."""
    how: str
    """How it was found, in a sentence."""


def structured_output_in_use(modes: ModeStore, endpoint: str, model: str) -> StructuredOutputInUse:
    """The mode calls to `model` at `endpoint` use and how it came to be: configured, or under
    `auto` the mode stored in Redis for the endpoint and model when it refused a higher one
    (kept a week), else the first mode, which it has never refused (`auto` stores nothing
    while the first mode is answered)."""
    from pipeline.llm.prompts import STRUCTURED_MODES
    from pipeline.llm.structured import TTL_S

    if not modes.auto:
        return StructuredOutputInUse(
            modes.configured, "configured", "configured: PIPELINE_LLM_STRUCTURED_OUTPUT"
        )
    found = modes.found(endpoint, model)
    first = STRUCTURED_MODES[0]
    if found is None or found == first:
        return StructuredOutputInUse(
            first,
            "auto: never refused",
            f"auto: {first}, the first mode, has not been refused by this endpoint",
        )
    refused = ", ".join(STRUCTURED_MODES[: STRUCTURED_MODES.index(found)])
    return StructuredOutputInUse(
        found,
        "found by auto",
        f"found by auto: the endpoint refused {refused}; every worker uses {found} "
        f"(stored in Redis for {TTL_S // 86_400} days)",
    )


def limiter_views(settings: Settings) -> list[dict[str, Any]]:
    """The global limiter's state for every scope these settings call: configured and
    effective rates, use of the current window, calls in flight, any shared pause."""
    from pipeline.llm.ratelimit import RedisLimiter, Scope
    from pipeline.llm.structured import ModeStore

    limiter = RedisLimiter.from_settings(settings, pool_size=1)
    if limiter is None or not settings.llm_base_url:
        return []
    views = []
    modes = ModeStore(settings.llm_structured_output, limiter.client)
    try:
        for model in _called_models(settings):
            in_use = structured_output_in_use(modes, settings.llm_base_url, model)
            for slot in range(len(settings.api_keys())):
                view = limiter.view(Scope(settings.llm_base_url, model, slot))
                views.append(
                    {
                        "model": model,
                        "structured_output": f"{in_use.mode} ({in_use.label})",
                        "structured_output_mode": in_use.mode,
                        "structured_output_how": in_use.how,
                        "key_slot": slot,
                        "rpm": settings.rate_limit_rpm,
                        "tpm": settings.rate_limit_tpm,
                        "max_inflight": settings.max_inflight,
                        "learned_rpm": view.learned_rpm,
                        "learned_tpm": view.learned_tpm,
                        "limits_from": limits_source(
                            settings.rate_limit_rpm,
                            settings.rate_limit_tpm,
                            view.learned_rpm,
                            view.learned_tpm,
                        ),
                        "pacing": settings.rate_limit_pacing,
                        "burst_s": settings.rate_limit_burst_s,
                        "effective_rpm": view.effective_rpm,
                        "effective_tpm": view.effective_tpm,
                        "factor": round(view.factor, 3),
                        "window_s": settings.rate_limit_window_s,
                        "requests_in_window": view.requests_in_window,
                        "tokens_in_window": view.tokens_in_window,
                        "inflight": view.inflight,
                        "paused_for_s": view.paused_for_s,
                    }
                )
    finally:
        limiter.client.close()
    return views


def circuit_view(settings: Settings) -> dict[str, Any] | None:
    """The LLM endpoint's circuit breaker (`pipeline.llm.circuit.state`): closed, open or
    probing; since when and for how long, the probes that failed, the next one, the last error,
    and the last outage that ended. None without Redis or an endpoint, or when Redis does not
    answer."""
    import redis

    from pipeline.core.constants import REDIS_CLIENT_OPTIONS
    from pipeline.llm import circuit

    url = settings.limiter_redis_url or settings.redis_url
    if not url or not settings.llm_base_url:
        return None
    client: redis.Redis = redis.Redis.from_url(url, **REDIS_CLIENT_OPTIONS)
    try:
        return circuit.state(client, settings.llm_base_url).as_dict()
    except redis.RedisError:
        return None
    finally:
        client.close()


def worker_views(settings: Settings) -> list[dict[str, Any]] | None:
    """The worker processes whose heartbeat is live, from Redis (None: no Redis configured or
    reachable)."""
    from pipeline.recovery.heartbeat import live_workers_at

    found = live_workers_at(settings.redis_url) if settings.redis_url else None
    return None if found is None else [asdict(worker) for worker in found]


def inbox_mismatch(settings: Settings, workers: list[dict[str, Any]] | None) -> str | None:
    """One sentence when PIPELINE_INBOX is set here and some live worker does not read it (the
    inbox each worker reads is in `worker_views`); None when they all do, or nothing compares."""
    from pipeline.recovery.heartbeat import LiveWorker
    from pipeline.runs.inbox import check_inbox

    if not settings.inbox or not workers:
        return None
    check = check_inbox(settings.inbox, [LiveWorker(**worker) for worker in workers])
    return None if check.verdict == "ok" else check.message
