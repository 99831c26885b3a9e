"""What `pipeline status` prints: a one-line summary, then the run at a glance in a grid of
short rows, then compact tables (why documents were not extracted, the documents whose quotes
were not all found, provider batches, the global limiter), each fitting 80 columns with its
headers whole. `--json` prints `status_json`, whose shape docs/status.md describes.

Pure: it renders what the command gathered (`StatusPage`), so that its tests render it at any
width without a run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import PurePath
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from pipeline.runs.failures import FailureGroup
from pipeline.runs.status import DocumentGrounding, RunStatusView

JSON_VERSION = 1
"""The version of `status --json`'s shape (docs/status.md): raised when a field changes meaning
or goes away; new fields may be added within a version."""
SHORT_ID = 8
"""A run id's first characters: enough for every command that takes RUN (they take a prefix)."""
GROUNDING_ROWS = 5
"""Documents shown whose quotes were not all found (the lowest rates); --json has them all."""
FAILURE_ROWS = 8
SUMMARY_CHARS = 80
WORKERS_NAMED = 3
"""Live workers named on their row; the rest are counted (--json lists them all)."""
DOCUMENT_ORDER = ("extracted", "failed", "skipped", "cancelled", "running", "pending")
LIMITS_FROM = {
    "configured": ("set", "PIPELINE_RATE_LIMIT_RPM/TPM"),
    "learned from headers": ("headers", "from the provider's headers"),
    "configured and learned from headers": ("both", "configured, the rest from headers"),
    "configured, lowered to the provider's headers": ("lowered", "configured, lowered to the headers"),
    "none": ("none", "none configured or learned"),
}
"""`limits_from` as a word for a table cell, and in words for the table's legend."""


@dataclass
class StatusPage:
    """Everything `pipeline status` shows of one run."""

    view: RunStatusView
    failures: list[FailureGroup] = field(default_factory=list)
    grounding: list[DocumentGrounding] = field(default_factory=list)
    limiter: list[dict[str, Any]] | None = None
    """None: the broker did not answer (or there is none)."""
    workers: list[dict[str, Any]] | None = None
    broker_problem: str | None = None
    inbox_warning: str | None = None
    window_s: float = 60.0
    notes: list[tuple[str, str]] = field(default_factory=list)
    """More (label, text) rows for the grid, from other parts (a provider outage)."""


def span(seconds: float) -> str:
    """A duration as people read it: 0.4 s, 41 s, 4m05s, 2h01m."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs} s"


def summary_line(view: RunStatusView) -> str:
    """One line: the run, its state and for how long, and where its documents are (in fewer
    words when the long form would not fit 80 columns)."""
    extracted = view.documents.get("extracted", 0)
    left = "".join(f", {n:,} {s}" for s in DOCUMENT_ORDER[1:] if (n := view.documents.get(s, 0)))
    state = view.status if view.status != "failed" else "FAILED"
    ongoing = view.finished_at is None and view.status in ("pending", "running")
    timing = f"for {span(view.elapsed_s)}" if ongoing else f"in {span(view.elapsed_s)}"
    head = f"run {view.run_id[:SHORT_ID]} {state}{' (simulated)' if view.simulated else ''} {timing}"
    line = f"{head}: {extracted:,} of {view.documents_total:,} documents extracted{left}"
    return (
        line
        if len(line) <= SUMMARY_CHARS
        else f"{head}: {extracted:,}/{view.documents_total:,} extracted{left}"
    )


def failure_line(group: FailureGroup) -> str:
    """`3 failed: answer did not validate after repair`."""
    return f"{group.documents} {group.status}: {group.reason}"


def render(page: StatusPage) -> RenderableType:
    """The whole text view; print it on a console of any width (it is made for 80)."""
    parts: list[RenderableType] = [Text(summary_line(page.view), style="bold"), Text(""), _grid(page)]
    for shown in (_failures(page), _grounding(page), _batches(page.view), _limiter(page)):
        if shown is not None:
            title, table, legend = shown
            parts += [Text(""), Text(title, style="bold"), table]
            parts += [Text(legend)] if legend else []
    return Group(*parts)


Titled = tuple[str, Table, str]
"""A table with its title above it and a legend below, each a line of its own (a table's own
title and caption are wrapped to the table's width)."""


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
    rows.append(("model", escape(_model(view, page.limiter))))
    rows += _workers(page)
    rows += [(label, escape(text)) for label, text in page.notes]
    if view.error:
        rows.append(("error", f"[red]{escape(view.error)}[/]"))
    rows.append(("report", _report(view)))
    return rows


def _when(view: RunStatusView) -> str:
    started = _moment(view.created_at)
    if view.finished_at:
        finished = _moment(view.finished_at)
        same_day = finished[:10] == started[:10]
        return f"{started} UTC to {finished[11:] if same_day else finished} ({span(view.elapsed_s)})"
    return f"since {started} UTC ({span(view.elapsed_s)})"


def _moment(iso: str) -> str:
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def _documents(view: RunStatusView) -> str:
    if not view.documents_total:
        return "none"
    counts = [f"{n:,} {s}" for s in DOCUMENT_ORDER if (n := view.documents.get(s, 0))]
    counts += [f"{n:,} {s}" for s, n in sorted(view.documents.items()) if s not in DOCUMENT_ORDER]
    return f"{', '.join(counts)} (of {view.documents_total:,})"


def _calls(view: RunStatusView) -> str:
    tokens = view.prompt_tokens + view.completion_tokens
    failed = f" ({view.llm_calls_failed:,} failed)" if view.llm_calls_failed else ""
    return (
        f"{view.llm_calls:,}{failed}, {tokens:,} tokens "
        f"({view.prompt_tokens:,} in, {view.completion_tokens:,} out)"
    )


def cost_line(view: RunStatusView) -> str:
    """The run's cost, its calls without a price and its budget."""
    cost = (
        "unknown: no price for the model (PIPELINE_LLM_PRICES)"
        if view.cost_usd is None
        else f"${view.cost_usd:,.4f}"
    )
    if view.cost_usd is not None and view.unpriced_calls:
        cost += f" (+{view.unpriced_calls:,} calls without a price)"
    if view.budget_usd is not None:
        cost += f" of a ${view.budget_usd:,.2f} budget"
    return cost


def pruned_line(pruned_at: str) -> str:
    """A pruned run's row: what is gone, and that the counts above are from before."""
    return (
        f"filing texts, chunks and call rows deleted {_moment(pruned_at)} UTC (`pipeline prune`); "
        "calls, tokens and cost as they were, extractions and report kept"
    )


def _quotes(view: RunStatusView) -> str:
    share = "" if view.grounding_rate is None else f" ({view.grounding_rate:.0%})"
    return f"{view.quotes_grounded:,} of {view.quotes_total:,} found in their filing{share}"


def _mode(view: RunStatusView) -> str:
    said = f"{view.mode}, {view.mode_reason}" if view.mode_reason else view.mode
    return said + (f"; deadline {_moment(view.deadline)} UTC" if view.deadline else "")


def _model(view: RunStatusView, limiter: list[dict[str, Any]] | None) -> str:
    """The run's model and the structured-output mode each model called uses now."""
    modes = {scope["model"]: scope["structured_output"] for scope in limiter or []}
    if not modes:
        return view.model
    if list(modes) == [view.model]:
        return f"{view.model}, structured output {modes[view.model]}"
    return "; ".join(f"{model}: {mode}" for model, mode in modes.items())


def _workers(page: StatusPage) -> list[tuple[str, str]]:
    rows = []
    if page.workers is not None:
        rows.append(("workers", escape(_live(page.workers))))
    if page.broker_problem:
        rows.append(("broker", f"[yellow]{escape(page.broker_problem)}[/]"))
    if page.inbox_warning:
        rows.append(("inbox", f"[yellow]{escape(page.inbox_warning)}[/]"))
    return rows


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


FOLDED = ("why", "document", "batch", "model", "name")
"""The columns that give way when a table is too wide (their text folds onto more lines); the
others keep their width, so no header is ever cut."""
RIGHT = (
    "documents",
    "extracted",
    "quotes",
    "found",
    "requests",
    "done",
    "failed",
    "rpm",
    "tpm",
    "calls",
    "tokens",
    "in flight",
)


def _table(*headers: str) -> Table:
    """A compact table: one space between columns and no borders but the header's rule."""
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    for header in headers:
        folded = header in FOLDED
        table.add_column(
            header,
            min_width=len(header),
            justify="right" if header in RIGHT else "left",
            no_wrap=not folded,
            overflow="fold" if folded else "ellipsis",
        )
    return table


def _failures(page: StatusPage) -> Titled | None:
    if not page.failures:
        return None
    total = sum(g.documents for g in page.failures)
    table = _table("documents", "why")
    for group in page.failures[:FAILURE_ROWS]:
        paths = example_paths(group)
        table.add_row(
            str(group.documents),
            f"{escape(group.status)}: {escape(group.reason)}\n[dim]e.g. {escape(paths)}[/]",
        )
    if len(page.failures) > FAILURE_ROWS:
        rest = sum(g.documents for g in page.failures[FAILURE_ROWS:])
        table.add_row(str(rest), f"{len(page.failures) - FAILURE_ROWS} other reasons (see --json)")
    return f"why {total} documents were not extracted", table, ""


def example_paths(group: FailureGroup) -> str:
    """The group's first document (its file name: --json has the paths), and how many more
    share its reason."""
    more = group.documents - 1
    return (file_name(group.paths[0]) if group.paths else "") + (f" and {more} more" if more else "")


def file_name(path: str) -> str:
    return PurePath(path).name or path


def _grounding(page: StatusPage) -> Titled | None:
    """The documents worth a look: quotes not all found, the revenue quote not found, or text
    aimed at a model; the lowest rates first (every document is in --json)."""
    worth = [
        d
        for d in page.grounding
        if d.injection_flag
        or d.revenue_grounded is False
        or (d.grounding_rate is not None and d.grounding_rate < 1)
    ]
    if not worth:
        return None
    shown = worth[:GROUNDING_ROWS]
    title = f"quotes found in the filing: {len(shown)} of {len(worth)} documents below 100 %"
    table = _table("quotes", "found", "revenue", "flag", "document")
    for d in shown:
        revenue = {True: "found", False: "NOT FOUND", None: ""}[d.revenue_grounded]
        share = "" if d.grounding_rate is None else f" {d.grounding_rate:.0%}"
        table.add_row(
            str(d.quotes_total),
            f"{d.quotes_grounded}{share}",
            revenue,
            "FLAGGED" if d.injection_flag else "",
            escape(file_name(d.path)),
        )
    return title, table, ""


def _batches(view: RunStatusView) -> Titled | None:
    if not view.batches:
        return None
    table = _table("batch", "status", "requests", "done", "failed")
    for item in view.batches:
        table.add_row(
            escape(str(item["batch"])),
            escape(str(item["status"])),
            f"{item['requests']:,}",
            f"{item['completed']:,}",
            f"{item['failed']:,}",
        )
    return "provider batches", table, ""


def _limiter(page: StatusPage) -> Titled | None:
    """One row per model (and API key, when there are several): the rates in force, this
    window's use, calls in flight and any shared pause after a 429; where the limits come from
    in the title when every row agrees, else in a column and a legend."""
    if not page.limiter:
        return None
    sources = list(dict.fromkeys(scope["limits_from"] for scope in page.limiter))
    keys = len({scope["key_slot"] for scope in page.limiter}) > 1
    headers = ["model", *(["key"] if keys else []), *(["limits"] if len(sources) > 1 else [])]
    headers += ["rpm", "tpm", "calls", "tokens", "in flight", "paused"]
    cut = min(scope["factor"] for scope in page.limiter) < 1
    title = f"global limiter, {page.window_s:g} s window"
    if len(sources) == 1:
        title += f", limits {LIMITS_FROM.get(sources[0], (sources[0], sources[0]))[1]}"
    table = _table(*headers)
    for scope in page.limiter:
        cells = [escape(str(scope["model"]))]
        if keys:
            cells.append(str(scope["key_slot"]))
        if len(sources) > 1:
            cells.append(LIMITS_FROM.get(scope["limits_from"], ("?", ""))[0])
        mark = "*" if scope["factor"] < 1 else ""
        cells += [
            _limit(scope["effective_rpm"]) + mark,
            _limit(scope["effective_tpm"]) + mark,
            _count(scope["requests_in_window"]),
            _count(scope["tokens_in_window"]),
            f"{scope['inflight']:,}" + (f"/{scope['max_inflight']:,}" if scope["max_inflight"] else ""),
            span(scope["paused_for_s"]) if scope["paused_for_s"] else "no",
        ]
        table.add_row(*cells)
    legend = [
        f"{word}: {words}"
        for source in sources
        if len(sources) > 1
        for word, words in [LIMITS_FROM.get(source, (source, source))]
    ]
    if cut:
        legend.append("*: cut after the provider's 429s, climbing back")
    return title, table, "; ".join(legend)


def _limit(n: int) -> str:
    """A rate limit as `_count` writes it; 0 (no limit) as none."""
    return _count(n) if n else "none"


def _count(n: int) -> str:
    """A count in at most about six characters: 9,000, 27.0M, 1.2B."""
    if n < 100_000:
        return f"{n:,}"
    for size, unit in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "k")):
        if n >= size:
            return f"{n / size:.1f}{unit}" if n < 100 * size else f"{n // size:,}{unit}"
    return f"{n:,}"


def _shortened(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def runs_table(views: list[RunStatusView]) -> Table:
    """`pipeline runs`: one row a run, newest first, made for 80 columns (the id is its first
    characters, which every command takes; `--json` has it whole). `failed` counts the
    documents not extracted for a fault (failed or cancelled); `status RUN` says why."""
    table = _table("run", "status", "extracted", "failed", "started UTC", "took", "name")
    for view in views:
        failed = sum(view.documents.get(s, 0) for s in ("failed", "cancelled"))
        table.add_row(
            view.run_id[:SHORT_ID],
            view.status if view.status != "failed" else "FAILED",
            f"{view.documents.get('extracted', 0):,}/{view.documents_total:,}",
            f"{failed:,}" if failed else "",
            _moment(view.created_at)[:16],
            span(view.elapsed_s),
            escape(view.name or ""),
        )
    return table


def status_json(page: StatusPage) -> dict[str, Any]:
    """The shape docs/status.md describes: the run's fields, then what was gathered around it."""
    return {
        "version": JSON_VERSION,
        "summary": summary_line(page.view),
        **page.view.as_dict(),
        "failures": [asdict(group) for group in page.failures],
        "grounding": [asdict(d) for d in page.grounding],
        "structured_output": _structured(page.limiter),
        "limiter": page.limiter,
        "workers": page.workers,
        "inbox_warning": page.inbox_warning,
        "broker_problem": page.broker_problem,
        "notes": [{"label": label, "text": text} for label, text in page.notes],
    }


def _structured(limiter: list[dict[str, Any]] | None) -> list[dict[str, str]] | None:
    if limiter is None:
        return None
    found = {
        scope["model"]: {
            "model": scope["model"],
            "mode": scope["structured_output_mode"],
            "how": scope["structured_output_how"],
        }
        for scope in limiter
    }
    return list(found.values())
