"""The tables of `pipeline status` under its grid (why documents were not extracted, the
documents whose quotes were not all found, provider batches, the global limiter) and the table
of `pipeline runs`: compact, each fitting 80 columns with its headers whole.
"""

from __future__ import annotations

from rich import box
from rich.markup import escape
from rich.table import Table

from pipeline.cli.status_page import (
    FAILURE_ROWS,
    SHORT_ID,
    StatusPage,
    example_paths,
    file_name,
    moment,
    span,
)
from pipeline.runs.status import RunStatusView

GROUNDING_ROWS = 5
"""Documents shown whose quotes were not all found (the lowest rates); --json has them all."""
LIMITS_FROM = {
    "configured": ("set", "PIPELINE_RATE_LIMIT_RPM/TPM"),
    "learned from headers": ("headers", "from the provider's headers"),
    "configured and learned from headers": ("both", "configured, the rest from headers"),
    "configured, lowered to the provider's headers": ("lowered", "configured, lowered to the headers"),
    "none": ("none", "none configured or learned"),
}
"""`limits_from` as a word for a table cell, and in words for the table's legend."""

Titled = tuple[str, Table, str]
"""A table with its title above it and a legend below, each a line of its own (a table's own
title and caption are wrapped to the table's width)."""

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


def failures_table(page: StatusPage) -> Titled | None:
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


def grounding_table(page: StatusPage) -> Titled | None:
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
    total = len(worth) if page.grounding_worth is None else page.grounding_worth
    title = f"quotes found in the filing: {len(shown)} of {total:,} documents below 100 %"
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


def batches_table(view: RunStatusView) -> Titled | None:
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


def limiter_table(page: StatusPage) -> Titled | None:
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
            moment(view.created_at)[:16],
            span(view.elapsed_s),
            escape(view.name or ""),
        )
    return table
