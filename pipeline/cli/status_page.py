"""What `pipeline status` gathered of one run (`StatusPage`), and the lines every form of it
shares: the summary line, the cost, a group of failures, a duration, a moment. The page
(`status_view`), its tables (`status_tables`), its JSON (`status_json`) and the end of a
followed run (`base.outcome`) say them alike.

Pure, as the rest of the status view: it renders what the command gathered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePath
from typing import Any

from pipeline.runs.failures import FailureGroup
from pipeline.runs.status import DocumentGrounding, RunStatusView

SHORT_ID = 8
"""A run id's first characters: enough for every command that takes RUN (they take a prefix)."""
FAILURE_ROWS = 8
SUMMARY_CHARS = 80
DOCUMENT_ORDER = ("extracted", "failed", "skipped", "cancelled", "running", "pending")


@dataclass
class StatusPage:
    """Everything `pipeline status` shows of one run."""

    view: RunStatusView
    failures: list[FailureGroup] = field(default_factory=list)
    grounding: list[DocumentGrounding] = field(default_factory=list)
    grounding_worth: int | None = None
    """How many documents are worth a look where `grounding` holds only the first of them (the
    page's); None where it holds every document (--json)."""
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


def example_paths(group: FailureGroup) -> str:
    """The group's first document (its file name: --json has the paths), and how many more
    share its reason."""
    more = group.documents - 1
    return (file_name(group.paths[0]) if group.paths else "") + (f" and {more} more" if more else "")


def file_name(path: str) -> str:
    return PurePath(path).name or path


def moment(iso: str) -> str:
    """An ISO timestamp as `2024-05-01 06:00:00` (left as it is when it does not parse)."""
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso
