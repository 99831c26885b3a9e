"""What `pipeline status` prints: a one-line summary, then the run at a glance in a grid of
short rows, then compact tables (why documents were not extracted, the documents whose quotes
were not all found, provider batches, the global limiter: `status_tables`), each fitting 80
columns with its headers whole. `--json` prints `status_json.status_json`, whose shape
docs/status.md describes.

Pure: it renders what the command gathered (`StatusPage`), so that its tests render it at any
width without a run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from pipeline.cli.status_page import (
    DOCUMENT_ORDER,
    SHORT_ID,
    StatusPage,
    cost_line,
    moment,
    span,
    summary_line,
)
from pipeline.cli.status_tables import batches_table, failures_table, grounding_table, limiter_table
from pipeline.reporting.trust_text import confidence_lines
from pipeline.runs.status import RunStatusView

WORKERS_NAMED = 3
"""Live workers named on their row; the rest are counted (--json lists them all)."""


def render(page: StatusPage) -> RenderableType:
    """The whole text view; print it on a console of any width (it is made for 80)."""
    parts: list[RenderableType] = [Text(summary_line(page.view), style="bold"), Text(""), _grid(page)]
    for shown in (failures_table(page), grounding_table(page), batches_table(page.view), limiter_table(page)):
        if shown is not None:
            title, table, legend = shown
            parts += [Text(""), Text(title, style="bold"), table]
            parts += [Text(legend)] if legend else []
    return Group(*parts)


def _grid(page: StatusPage) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for label, value in _rows(page):
        grid.add_row(label, value)
    return grid


def _rows(page: StatusPage) -> list[tuple[str, str]]:
    view = page.view
    rows = [("run", escape(view.run_id + (f" ({view.name})" if view.name else "")))]
    rows.append(("query", escape(_shortened(view.query, 160))))
    rows.append(("when", _when(view)))
    rows.append(("documents", _documents(view)))
    if view.chunks_total:
        rows.append(("chunks", f"{view.chunks_done:,} of {view.chunks_total:,} answered"))
    rows.append(("LLM calls", _calls(view)))
    rows.append(("cost", escape(cost_line(view))))
    if view.pruned_at:
        rows.append(("pruned", escape(pruned_line(view.pruned_at))))
    if view.batch_calls:
        rows.append(
            (
                "batch",
                f"{view.batch_calls:,} answers at batch prices: ${view.batch_cost_usd:,.4f}, "
                f"saved ${view.batch_saved_usd:,.4f} against sync prices",
            )
        )
    if view.quotes_total:
        rows.append(("quotes", _quotes(view)))
    if view.injection_flagged:
        rows.append(
            ("flagged", f"[yellow]{view.injection_flagged} documents hold instructions aimed at a model[/]")
        )
    if view.reclaimed:
        taken = sum(view.reclaimed.values())
        rows.append(
            ("reclaimed", escape(f"{taken} documents taken back from {len(view.reclaimed)} dead workers"))
        )
    rows.append(("mode", escape(_mode(view))))
    if view.tier_reason:
        rows.append(("planner", escape(view.tier_reason)))
    if view.tiers:
        rows.append(("tiers", escape(_tiers(view.tiers))))
    if view.estimate:
        rows.append(("estimate", escape(estimate_line(view.estimate))))
    rows += [("confidence", escape(line)) for line in confidence_lines(view.confidence)]
    rows.append(("model", escape(_model(view, page.limiter))))
    rows += _workers(page)
    rows += [(label, escape(text)) for label, text in page.notes]
    if view.error:
        rows.append(("error", f"[red]{escape(view.error)}[/]"))
    rows.append(("report", _report(view)))
    return rows


def _tiers(tiers: dict[str, dict[str, int]]) -> str:
    from pipeline.runs.tiers import tiers_line

    return tiers_line({tier: sum(reasons.values()) for tier, reasons in tiers.items()})


def estimate_line(figures: dict[str, Any]) -> str:
    """The estimate at submit and, where the run has it, what it used and the error."""

    def one(name: str, shown: Callable[[float], str]) -> str:
        pair = figures[name]
        if pair["estimate"] is None:
            return f"{name} unknown"
        text = shown(pair["estimate"])
        if pair["error"] is not None:
            text += f" (actual {shown(pair['actual'])}, {pair['error']:+.0%})"
        return text

    cached = figures.get("cached_tokens") or {}
    return ", ".join(
        [
            one("calls", lambda n: f"{n:,.0f} calls"),
            one("tokens", lambda n: f"{n:,.0f} tokens"),
            *([one("cached_tokens", lambda n: f"{n:,.0f} cached")] if cached.get("estimate") else []),
            one("cost_usd", lambda n: f"${n:,.4f}"),
            one("seconds", span),
        ]
    )


def _when(view: RunStatusView) -> str:
    started = moment(view.created_at)
    if view.finished_at:
        finished = moment(view.finished_at)
        same_day = finished[:10] == started[:10]
        return f"{started} UTC to {finished[11:] if same_day else finished} ({span(view.elapsed_s)})"
    return f"since {started} UTC ({span(view.elapsed_s)})"


def _documents(view: RunStatusView) -> str:
    if not view.documents_total:
        return "none"
    counts = [f"{n:,} {s}" for s in DOCUMENT_ORDER if (n := view.documents.get(s, 0))]
    counts += [f"{n:,} {s}" for s, n in sorted(view.documents.items()) if s not in DOCUMENT_ORDER]
    return f"{', '.join(counts)} (of {view.documents_total:,})"


def _calls(view: RunStatusView) -> str:
    tokens = view.prompt_tokens + view.completion_tokens
    failed = f" ({view.llm_calls_failed:,} failed)" if view.llm_calls_failed else ""
    cached = f" of which {view.cached_tokens:,} cached" if view.cached_tokens else ""
    return (
        f"{view.llm_calls:,}{failed}, {tokens:,} tokens "
        f"({view.prompt_tokens:,} in{cached}, {view.completion_tokens:,} out)"
    )


def pruned_line(pruned_at: str) -> str:
    """A pruned run's row: what is gone, and that the counts above are from before."""
    return (
        f"filing texts, chunks and call rows deleted {moment(pruned_at)} UTC (`pipeline prune`); "
        "calls, tokens and cost as they were, extractions and report kept"
    )


def _quotes(view: RunStatusView) -> str:
    share = "" if view.grounding_rate is None else f" ({view.grounding_rate:.0%})"
    return f"{view.quotes_grounded:,} of {view.quotes_total:,} found in their filing{share}"


def _mode(view: RunStatusView) -> str:
    said = f"{view.mode}, {view.mode_reason}" if view.mode_reason else view.mode
    return said + (f"; deadline {moment(view.deadline)} UTC" if view.deadline else "")


def _model(view: RunStatusView, limiter: list[dict[str, Any]] | None) -> str:
    """The run's model and the structured-output mode each model called uses now."""
    modes = {scope["model"]: scope["structured_output"] for scope in limiter or []}
    if not modes:
        return view.model
    if list(modes) == [view.model]:
        return f"{view.model}, structured output {modes[view.model]}"
    return "; ".join(f"{model}: {mode}" for model, mode in modes.items())


def _workers(page: StatusPage) -> list[tuple[str, str]]:
    from pipeline.runs.progress import FINAL_RUN_STATUSES

    rows = []
    if page.workers == [] and page.view.status not in FINAL_RUN_STATUSES:
        rows.append(("workers", f"[yellow]{escape(NO_WORKER_WAITING)}[/]"))
    elif page.workers is not None:
        rows.append(("workers", escape(_live(page.workers))))
    if page.broker_problem:
        rows.append(("broker", f"[yellow]{escape(page.broker_problem)}[/]"))
    if page.inbox_warning:
        rows.append(("inbox", f"[yellow]{escape(page.inbox_warning)}[/]"))
    return rows


NO_WORKER_WAITING = (
    "none live (no heartbeat in this broker): nothing takes this run's documents; start "
    "`pipeline worker` with this PIPELINE_REDIS_URL and PIPELINE_DATABASE_URL"
)
"""The workers row of a run still to be worked on when no worker's heartbeat is in its broker."""


def _live(workers: list[dict[str, Any]]) -> str:
    """`2 live: a (0 held), b (3 held)`; past WORKERS_NAMED, the first named and the rest counted."""
    if not workers:
        return "none live (no heartbeat)"
    named = [f"{w['name'] or w['owner']} ({w['held']} held)" for w in workers[:WORKERS_NAMED]]
    if len(workers) <= WORKERS_NAMED:
        return f"{len(workers)} live: {', '.join(named)}"
    held = sum(w["held"] for w in workers)
    return f"{len(workers)} live, {held:,} documents held: {', '.join(named)} and {len(workers) - WORKERS_NAMED} more"


def _report(view: RunStatusView) -> str:
    short = view.run_id[:SHORT_ID]
    if view.has_report:
        return f"pipeline report {short} -o {short}.html"
    return "not written yet"


def _shortened(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
