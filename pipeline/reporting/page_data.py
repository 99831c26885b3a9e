"""What the HTML page of a run shows, read from the database: the stored report, the run's LLM
calls, cost per stage and model, the slowest documents, and a custom schema's extractions."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from redis.exceptions import RedisError

from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings
from pipeline.extraction.custom import GROUNDING_KEY, load_schema
from pipeline.llm.ratelimit.policy import limit_in_force
from pipeline.reporting.timeline import CallDigest, CallSpan, digest_of, fold_calls
from pipeline.storage import run_page, runs
from pipeline.storage.db import session_scope
from pipeline.storage.llm_calls import CallTotals, call_totals
from pipeline.storage.models import Run, aware
from pipeline.storage.retention import kept_totals

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

SLOWEST_DOCUMENTS = 10


@dataclass(frozen=True)
class Quota:
    per_s: float
    label: str


@dataclass(frozen=True)
class CostRow:
    key: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    """None when none of these calls was priced."""


@dataclass(frozen=True)
class SlowDocument:
    path: str
    status: str
    seconds: float
    calls: int
    chunks: int


@dataclass
class CustomTable:
    """A `--schema` run's extractions: that schema's top-level fields, per document."""

    schema: str
    fields: list[str]
    rows: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(path, extractions.data with its `_grounding` checks)."""


@dataclass
class PageInput:
    report: dict[str, Any]
    """The stored report JSON (reports.json): what the Markdown report shows."""
    status: str
    created_at: datetime
    finished_at: datetime | None
    calls: list[CallSpan] = field(default_factory=list)
    """The run's calls, when a page is built from them (tests); `load_page` folds them into
    `digest` as it reads them and leaves this empty."""
    quota: Quota | None = None
    by_stage: list[CostRow] = field(default_factory=list)
    by_model: list[CostRow] = field(default_factory=list)
    slowest: list[SlowDocument] = field(default_factory=list)
    custom: CustomTable | None = None
    totals: CallTotals | None = None
    """The run's calls as `pipeline status` counts them now (None: the stored report's totals)."""
    pruned_at: datetime | None = None
    """When `pipeline prune` deleted the run's call rows (the charts of them went with them)."""
    digest: CallDigest | None = None
    custom_total: int = 0
    """How many documents a custom schema's run extracted (its table lists LISTED_ROWS)."""

    def call_digest(self) -> CallDigest:
        """What the page says of the run's calls: `digest`, or folded from `calls`."""
        return self.digest if self.digest is not None else digest_of(self.calls)


class NoReport(LookupError):
    pass


def limiter_state(settings: Settings) -> list[dict[str, Any]]:
    """The limiter's view of each scope (limits learned from the provider live in Redis); empty
    without a Redis to ask, as when the embedded one of `pipeline run` has stopped."""
    from pipeline.runs.status import limiter_views

    try:
        return limiter_views(settings)
    except (RedisError, OSError, ConfigError):
        return []


def load_page(
    engine: Engine, run_id: str, settings: Settings, limiter: list[dict[str, Any]] | None = None
) -> PageInput:
    """The page's data for `run_id`; NoReport before its report is written. `limiter` is
    `limiter_state(settings)` unless given."""
    if limiter is None:
        limiter = limiter_state(settings)
    with session_scope(engine) as session:
        run = runs.get_run(session, run_id)
        report = run_page.report_json(session, run_id)
        if run is None or report is None:
            raise NoReport(f"run {run_id} has no report yet (see `pipeline status {run_id}`)")
        start = aware(run.created_at)
        by_stage, by_model = (_costs(session, run_id, key) for key in ("stage", "model"))
        custom = _custom(session, run_id, run.schema) if run.schema else None
        return PageInput(
            report=report,
            status=run.status,
            created_at=start,
            finished_at=aware(run.finished_at) if run.finished_at else None,
            digest=_calls(session, run_id, start),
            quota=quota(limiter, {r.key for r in by_model}, settings),
            by_stage=by_stage,
            by_model=by_model,
            slowest=_slowest(session, run_id),
            custom=custom,
            custom_total=run_page.extracted_count(session, run_id) if custom else 0,
            totals=_totals(session, run),
            pruned_at=aware(run.pruned_at) if run.pruned_at else None,
        )


def _calls(session: Session, run_id: str, start: datetime) -> CallDigest:
    """The run's calls folded as they are read, in the orders the fold needs: the page holds
    its charts' bins, not the calls (a 20,000-document run records 100,000 of them)."""

    def spans(order: run_page.CallOrder) -> Iterator[CallSpan]:
        for end, latency, wait, status in run_page.call_timings(session, run_id, order):
            yield CallSpan((aware(end) - start).total_seconds(), latency / 1000, wait / 1000, status)

    last = run_page.last_sent_call(session, run_id)
    end_s = None if last is None else (aware(last) - start).total_seconds()
    return fold_calls(spans("sent"), spans("queued"), spans("held"), end_s)


def _totals(session: Session, run: Run) -> CallTotals:
    """The run's calls as `pipeline status` counts them: as they were, once pruned (its call
    rows are gone, and the page's charts of them with them)."""
    kept = kept_totals(run.pruned)
    return kept[0] if kept else call_totals(session, run.id)


def quota(views: list[dict[str, Any]], models: set[str], settings: Settings) -> Quota | None:
    """The request quota the run's calls shared, per second: for each scope the run used, the
    configured RPM or the one learned from the provider's headers (the lower, as the limiter
    does); without the limiter's view, the configured RPM per model and key."""
    scopes = [v for v in views if v["model"] in models]
    if scopes:
        rpm = sum(limit_in_force(int(v["rpm"]), int(v["learned_rpm"] or 0)) for v in scopes)
        sources = sorted({str(v["limits_from"]) for v in scopes if v["limits_from"] != "none"})
    else:
        rpm = settings.rate_limit_rpm * len(settings.api_keys()) * max(1, len(models))
        sources = ["configured"] if rpm else []
    if not rpm:
        return None
    window_s = settings.rate_limit_window_s
    return Quota(rpm / window_s, f"quota: {rpm:,} per {window_s:g} s ({', '.join(sources)})")


def _costs(session: Session, run_id: str, key: Literal["stage", "model"]) -> list[CostRow]:
    return [
        CostRow(str(name), int(n), int(p), int(c), None if usd is None else float(usd))
        for name, n, p, c, usd in run_page.costs_by(session, run_id, key)
    ]


def _slowest(session: Session, run_id: str) -> list[SlowDocument]:
    """The SLOWEST_DOCUMENTS documents that took longest from start to end, from the run's
    documents streamed (only those few held), with their calls."""
    timed = (
        (doc_id, path, status, (aware(end) - aware(begin)).total_seconds(), chunks or 0)
        for doc_id, path, status, begin, end, chunks in run_page.timed_documents(session, run_id)
        if begin is not None and end is not None  # the query's WHERE: they are not
    )
    found = heapq.nlargest(SLOWEST_DOCUMENTS, timed, key=lambda d: d[3])
    calls = run_page.calls_per_document(session, run_id, [d[0] for d in found])
    return [
        SlowDocument(path, status, seconds, calls.get(doc_id, 0), chunks)
        for doc_id, path, status, seconds, chunks in found
    ]


def _custom(session: Session, run_id: str, schema: str) -> CustomTable:
    """A custom schema's table: its first LISTED_ROWS documents by path (the report's limit)."""
    from pipeline.reporting import report_rows  # here: it loads the LLM client, 30 MB a page needs not

    rows = run_page.custom_rows(session, run_id, report_rows.LISTED_ROWS)
    try:
        fields = list(load_schema(schema).model_fields)
    except ValueError:  # not importable here: the fields the answers hold, in order
        fields = list(dict.fromkeys(key for _, data in rows for key in data if key != GROUNDING_KEY))
    return CustomTable(schema, fields, rows)
