"""`pipeline plan PATHS…` (and `submit --dry-run`): what a run of these files would cost and take
in each mode, before anything is stored or sent."""

from __future__ import annotations

import json
import logging
import shutil
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.cli.base import console, main
from pipeline.cli.submit import deadline_source, links_option, mode_options, with_links, with_mode
from pipeline.core import exits
from pipeline.core.settings import Settings, get_settings

if TYPE_CHECKING:
    from pipeline.ingest.producer import SubmitPlan
    from pipeline.runs.estimate import Plan
    from pipeline.storage.usage import RecentUsage

log = logging.getLogger(__name__)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON on stdout.")
@click.option(
    "--fresh",
    is_flag=True,
    help="Price every chunk, as `submit --fresh` asks again what earlier runs answered for the same text.",
)
@links_option
@mode_options
def plan(
    paths: tuple[str, ...],
    as_json: bool,
    fresh: bool,
    follow_links: bool | None,
    mode: str | None,
    deadline: str | None,
) -> None:
    """Estimate a run of PATHS in each mode (sync, flex, batch, auto): calls, tokens, cost, time
    and whether the deadline is met. Reads and chunks the files as submit would; stores
    nothing and calls no LLM. Chunks an earlier run answered for the same text cost nothing
    (unless --fresh). Exits 6 when the run's mode costs more than PIPELINE_RUN_BUDGET_USD."""
    settings = with_links(with_mode(get_settings(), mode, deadline), follow_links)
    sys.exit(show_plan(settings, list(paths), as_json, reuse=not fresh))


def show_plan(settings: Settings, paths: list[str], as_json: bool, reuse: bool = True) -> int:
    """Print the plan of `paths`; the exit code (6 over the budget). With `reuse`, chunks an
    earlier run answered for the same text are counted as answered."""
    from pipeline.core.deadline import fixed_deadline
    from pipeline.ingest.producer import survey
    from pipeline.runs.estimate import limits_for, plan_run

    # The deadline fixed once, before the files are read; on this host's clock (an estimate,
    # which may run with no database: submit fixes it again on the database's).
    now = datetime.now(UTC)
    deadline = None
    if settings.run_deadline:
        deadline = fixed_deadline(settings.run_deadline, now, deadline_source(settings), "this host's clock")
    from pipeline.extraction.layout_choice import chosen

    choice = chosen(settings)
    surveyed = survey(settings, paths)
    usage, batch_seconds, history_note = _history(settings)
    if reuse:
        surveyed = _reusing(settings, surveyed)
    estimate = plan_run(settings, surveyed, usage, limits_for(settings), now, deadline, batch_seconds)
    if as_json:
        click.echo(
            json.dumps(
                {
                    **estimate.as_json(),
                    "layout": asdict(choice),
                    "history": history_note,
                    "files": surveyed.files,
                },
                indent=2,
            )
        )
    else:
        _print_files(surveyed.files)
        _print(estimate, history_note)
        _stdout().print(escape(choice.reason), highlight=False)
    if estimate.over_budget:
        console.print(
            f"[bold red]error:[/] the {estimate.chosen.mode} run is estimated at "
            f"{usd(estimate.chosen.cost_usd)}, over PIPELINE_RUN_BUDGET_USD={usd(estimate.budget_usd)}: "
            "raise the budget, choose a cheaper mode (--mode batch), or submit fewer files"
        )
        return exits.OVER_BUDGET
    if not estimate.work.documents:
        console.print(
            "[bold red]error:[/] no usable document among the paths given (each is listed with its reason)"
        )
        return exits.USAGE
    return exits.OK


def _reusing(settings: Settings, surveyed: SubmitPlan) -> SubmitPlan:
    """The survey without what earlier runs answered, when the database answers."""
    from pipeline.runs.estimate import reusing
    from pipeline.storage.db import ensure_schema

    try:
        return reusing(ensure_schema(settings.resolved_database_url), settings, surveyed)
    except Exception as exc:  # no database yet: nothing to reuse
        log.debug("no stored answers: %s", exc)
        return surveyed


def _history(settings: Settings) -> tuple[RecentUsage, float | None, str]:
    """The last runs' usage of the model, from the database when it answers."""
    from pipeline.runs.estimate import history
    from pipeline.storage.db import ensure_schema
    from pipeline.storage.usage import RecentUsage

    try:
        usage, batch_seconds = history(ensure_schema(settings.resolved_database_url), settings)
    except Exception as exc:  # no database yet, or it does not answer: assumed figures
        log.debug("no history: %s", exc)
        return RecentUsage(), None, f"none: the database could not be read ({type(exc).__name__})"
    layout = f"in the {settings.chosen_layout()[0]} layout ({settings.prompt_version()})"
    if not usage.runs:
        return usage, batch_seconds, f"none: no completed sync run of {settings.llm_model} {layout} yet"
    return usage, batch_seconds, f"the last {usage.runs} completed run(s) of {settings.llm_model} {layout}"


FILES_SHOWN = 200
"""Files listed one by one; --json lists every file."""


def _print_files(files: list[dict[str, Any]]) -> None:
    """What will be read of each file, before a token is paid for."""
    if not files:
        return
    out = _stdout()
    table = Table(show_edge=False, pad_edge=False, title="what will be read", title_justify="left")
    for name in (
        "file",
        "read as",
        "form",
        "company (fiscal year)",
        "taken",
        "left out",
        "sections",
        "tokens",
    ):
        table.add_column(name, justify="right" if name == "tokens" else "left", overflow="fold")
    for view in files[:FILES_SHOWN]:
        company = view["company"] or "-"
        if view["fiscal_year"]:
            company += f" ({view['fiscal_year']})"
        left_out = ", ".join(f"{count} {_short(reason)}" for reason, count in view["left_out"].items())
        sections = ", ".join(name.replace("Item ", "") for name in view["sections"]) or "-"
        if view["doubted"]:
            sections += f"; doubted: {', '.join(d['name'] for d in view['doubted'])}"
        table.add_row(
            escape(view["path"]),
            view["format"] or "-",
            escape(view["form"] or "-"),
            escape(company),
            escape(", ".join(view["taken"]) or "-"),
            escape(left_out or "-"),
            escape(sections),
            f"{view['tokens']:,}" if not view["problem"] else "not taken",
        )
    out.print(table)
    if len(files) > FILES_SHOWN:
        out.print(f"… and {len(files) - FILES_SHOWN:,} more files (--json lists every one)", highlight=False)


def _short(reason: str) -> str:
    """A left-out reason's first words ("a uuencoded file", "XML data")."""
    return reason.split(" (")[0].split(":")[0]


def _print(estimate: Plan, history_note: str) -> None:
    from pipeline.core.deadline import format_duration

    work = estimate.work
    out = _stdout()
    out.print(
        f"{work.documents} documents, {work.chunks} chunks to ask, about {work.text_tokens:,} tokens of text"
        + (f"; {len(estimate.rejected)} files not taken" if estimate.rejected else ""),
        highlight=False,
    )
    for path, reason in estimate.rejected:
        out.print(f"  {escape(path)}: {escape(reason)}", highlight=False)
    if "reused" in work.sources:
        out.print(f"reused: {escape(work.sources['reused'])} (--fresh prices them)", highlight=False)
    limits = estimate.limits
    per = "min" if limits.window_s == 60 else format_duration(limits.window_s)
    source = limits.source
    if not (limits.rpm or limits.tpm) and work.seconds_per_call:
        source = "none configured or learned: the last runs' pace"
    out.print(
        f"limits: {limits.rpm or '-'} requests/{per}, {limits.tpm or '-'} tokens/{per} ({escape(source)}); "
        f"{limits.slots} calls at once; history: {escape(history_note)}",
        highlight=False,
    )
    if work.cached_tokens:
        out.print(
            f"cached: about {work.cached_tokens:,} of the tokens in are served from the provider's prompt "
            "cache (the instructions every call shares, each filing's context after its first chunk), "
            "at the cached-input price",
            highlight=False,
        )
    table = Table(show_edge=False, pad_edge=False)
    for name in ("mode", "calls", "tokens in", "tokens out", "cost", "time", "deadline", "note"):
        table.add_column(
            name, justify="right" if name in ("calls", "tokens in", "tokens out", "cost", "time") else "left"
        )
    for row in estimate.modes:
        table.add_row(
            row.mode,
            f"{row.calls:,}",
            f"{row.input_tokens:,}",
            f"{row.output_tokens:,}",
            usd(row.cost_usd),
            format_duration(row.seconds),
            {None: "-", True: "met", False: "missed"}[row.meets_deadline],
            escape(row.note),
        )
    out.print(table)
    out.print(f"the run would go {estimate.chosen.mode}: {escape(estimate.reason)}", highlight=False)


def _stdout() -> Console:
    return Console(width=max(120, shutil.get_terminal_size().columns), soft_wrap=True)


def usd(amount: float | None) -> str:
    """Dollars, to the cent; to a hundredth of a cent under a dollar."""
    if amount is None:
        return "unknown"
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"
