"""Retention: `pipeline prune` (old runs' filing texts, chunks and call rows)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape

from pipeline.cli.base import console, fail, main, open_engine, talks_to
from pipeline.core.settings import get_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.runs.retention import PrunedRun, PruneOutcome
    from pipeline.storage.retention import OldRun, Tally

RUNS_LISTED = 10
"""Runs named one per line; past them, a count (a first prune may take a year of nightlies)."""


class Duration(click.ParamType[float]):
    """90d, 12h, 2w, 1y, 30m, 45s: seconds; a clear sentence (exit 2) for anything else."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from pipeline.runs.retention import parse_duration

        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@main.command()
@click.option(
    "--older-than",
    "older_than_s",
    type=Duration(),
    metavar="DURATION",
    help="Prune the runs that ended longer ago than this: 90d, 12h, 2w, 1y (365 days), 30m, 45s "
    "[default: PIPELINE_RETENTION_DAYS].",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Delete those runs whole: their documents, extractions, risk factors and reports too.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted (rows and bytes); change nothing.")
@click.option(
    "--vacuum",
    is_flag=True,
    help="Then VACUUM (ANALYZE) the pruned tables, so their space is reused at once (Postgres: "
    "reads and writes go on; never VACUUM FULL. SQLite: rewrites the file, which shrinks).",
)
@click.option("--yes", is_flag=True, help="With --all: do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: the runs and what went.")
def prune(
    older_than_s: float | None, everything: bool, dry_run: bool, vacuum: bool, yes: bool, as_json: bool
) -> None:
    """Delete the filing texts, chunks and LLM call rows of runs that ended long ago.

    Their extractions, risk factors and reports stay, and `pipeline status` and `report` still
    show them (their calls, tokens and cost as they were). A filing's text that a newer run
    also has stays. Runs that are not final (pending, running, stalled) are never pruned,
    whatever their age. Safe to repeat, and to run while workers work; beat runs it nightly
    when PIPELINE_RETENTION_DAYS is set."""
    from pipeline.runs.retention import prune_runs

    settings = get_settings()
    if older_than_s is None:
        if settings.retention_days is None:
            fail("say how old a run must be: --older-than 90d (or set PIPELINE_RETENTION_DAYS)")
        older_than_s = settings.retention_days * 86_400
    if not as_json:
        console.print(f"pipeline prune: {escape(talks_to(settings)[1])}", highlight=False)
    engine = open_engine(settings)
    if everything and not dry_run and not yes:
        _confirm_all(engine, older_than_s)
    out = Console(soft_wrap=True, highlight=False)
    shown = 0

    def said(run: PrunedRun) -> None:
        nonlocal shown
        shown += 1
        if not as_json and shown <= RUNS_LISTED:
            out.print(_run_line(run, everything, dry_run=False))

    if not as_json:
        out.print(_heading(older_than_s, everything, dry_run))
    outcome = prune_runs(engine, older_than_s, everything=everything, dry_run=dry_run, on_run=said)
    vacuumed = _vacuum(engine, outcome) if vacuum and not dry_run and outcome.pruned else None
    if as_json:
        click.echo(json.dumps(_as_json(outcome, vacuumed), indent=2))
        return
    if dry_run:
        for run in outcome.runs[:RUNS_LISTED]:
            out.print(_run_line(run, everything, dry_run=True))
    for line in _summary(outcome, engine.dialect.name, vacuumed):
        out.print(line)
    sys.exit(0)


def _confirm_all(engine: Engine, older_than_s: float) -> None:
    """--all deletes what no other command gives back: ask, or refuse without a terminal."""
    from pipeline.runs.retention import duration_words, prune_runs

    would = prune_runs(engine, older_than_s, everything=True, dry_run=True)
    if not would.runs:
        return
    question = (
        f"delete {_n(len(would.runs), 'run')} whole (older than {duration_words(older_than_s)}): "
        f"{_n(would.total.documents, 'document')} with their extractions, risk factors and reports?"
    )
    if not sys.stdin.isatty():
        fail(f"--all would {question[:-1]}: add --yes to go on (--dry-run lists them)")
    click.confirm(question, abort=True, err=True)


def _vacuum(engine: Engine, outcome: PruneOutcome) -> str:
    from pipeline.runs.retention import vacuum

    return vacuum(engine, everything=outcome.everything)


def _heading(older_than_s: float, everything: bool, dry_run: bool) -> str:
    from pipeline.runs.retention import duration_words

    what = "deleted whole" if everything else "pruned"
    verb = f"that would be {what} (--dry-run: nothing is changed)" if dry_run else what
    return f"final runs that ended more than {duration_words(older_than_s)} ago, {verb}:"


def _run_line(run: PrunedRun, everything: bool, *, dry_run: bool) -> str:
    name = f"{run.name}, " if run.name else ""
    head = f"  {run.run_id[:8]} ({escape(name)}{run.status}, ended {_moment(run.ended)[:10]})"
    if run.refused is not None:
        return f"{head}: [yellow]left: {_refused(run.refused)}[/]"
    if everything:
        return f"{head}: {'would go' if dry_run else 'deleted'} whole, {_n(run.tally.documents, 'document')}"
    return f"{head}: {_rows(run.tally, texts=not dry_run)}"


def _refused(why: str) -> str:
    if why == "ended since":
        return "it ended again since (a retry), so it is not that old"
    if why == "gone":
        return "deleted meanwhile"
    return f"it is {why} again (a retry started meanwhile)"


def _rows(tally: Tally, *, texts: bool = True) -> str:
    parts = [f"{_n(tally.texts, 'filing text')} ({size(tally.text_bytes)})"] if texts else []
    parts += [
        f"{_n(tally.chunks, 'chunk')} ({size(tally.chunk_bytes)})",
        f"{_n(tally.calls, 'LLM call row')} ({size(tally.call_bytes)})",
    ]
    return ", ".join(parts)


def _summary(outcome: PruneOutcome, dialect: str, vacuumed: str | None) -> list[str]:
    lines: list[str] = []
    runs = outcome.pruned
    if len(outcome.runs) > RUNS_LISTED:
        lines.append(f"  … and {len(outcome.runs) - RUNS_LISTED:,} more")
    total = outcome.total
    before = f"that ended before {_moment(outcome.cutoff)} UTC"
    if not runs:
        what = "" if outcome.everything else " with filing texts, chunks or call rows left"
        lines.append(f"  none: no final run {before}{what}")
    else:
        verb = "would delete" if outcome.dry_run else "deleted"
        kept = total.texts_kept
        shared = (
            f"; {_n(kept, 'text')} kept: other runs that keep theirs have the same filings" if kept else ""
        )
        lines.append(
            f"{verb}, of {_n(len(runs), 'run')} {before}: {_rows(total)}; {size(total.bytes)} in all{shared}"
        )
        if outcome.everything:
            lines.append(
                f"and whole: {_n(total.documents, 'document')}, {_n(total.extractions, 'extraction')}, "
                f"{_n(total.risk_factors, 'risk factor')}, {_n(total.reports, 'report')} "
                f"({size(total.whole_bytes)})"
            )
        else:
            lines.append("kept: their extractions, risk factors and reports (`--all` deletes the runs whole)")
    if outcome.left:
        lines.append(_left(outcome.left))
    if runs and not outcome.dry_run:
        lines.append(_space(total.bytes, dialect, vacuumed, outcome.everything))
    return lines


def _left(left: list[OldRun]) -> str:
    named = ", ".join(f"{run.run_id[:8]} ({run.status})" for run in left[:RUNS_LISTED])
    more = f" and {len(left) - RUNS_LISTED} more" if len(left) > RUNS_LISTED else ""
    are = "is" if len(left) == 1 else "are"
    return (
        f"[yellow]left alone: {_n(len(left), 'old run')} that {are} not final (never pruned, whatever "
        f"the age): {named}{more}[/]; finish (`pipeline resume`) or cancel (`pipeline cancel`) to prune"
    )


def _space(deleted: int, dialect: str, vacuumed: str | None, everything: bool) -> str:
    if dialect == "sqlite":
        if vacuumed:
            return f"{vacuumed}: the SQLite file no longer holds the {size(deleted)}"
        return (
            f"SQLite reuses the {size(deleted)} for new rows; the file shrinks only with `--vacuum` "
            "(which rewrites it, the database locked meanwhile)"
        )
    if vacuumed:
        return (
            f"{vacuumed}: Postgres reuses the {size(deleted)} for new rows; the files on disk keep "
            "their size (only VACUUM FULL shrinks them, under an exclusive lock: not done)"
        )
    from pipeline.runs.retention import VACUUMED, VACUUMED_ALL

    tables = ", ".join(VACUUMED_ALL if everything else VACUUMED)
    return (
        f"Postgres reuses the {size(deleted)} once VACUUM has been through the tables (autovacuum in "
        f"time; now: `pipeline prune --vacuum`, or VACUUM (ANALYZE) {tables}); the files on disk keep "
        "their size (only VACUUM FULL shrinks them, under an exclusive lock: not done)"
    )


def _as_json(outcome: PruneOutcome, vacuumed: str | None) -> dict[str, Any]:
    return {
        "cutoff": outcome.cutoff.isoformat(timespec="seconds"),
        "older_than_s": outcome.older_than_s,
        "dry_run": outcome.dry_run,
        "all": outcome.everything,
        "runs": [
            {
                "run_id": run.run_id,
                "name": run.name,
                "status": run.status,
                "ended": run.ended.isoformat(timespec="seconds"),
                "deleted": run.tally.as_dict(),
                "left": run.refused,
            }
            for run in outcome.runs
        ],
        "left": [
            {"run_id": run.run_id, "status": run.status, "since": run.ended.isoformat(timespec="seconds")}
            for run in outcome.left
        ],
        "total": {**outcome.total.as_dict(), "bytes": outcome.total.bytes},
        "vacuum": vacuumed,
    }


def _n(count: int, noun: str) -> str:
    """1 run, 3 runs, 1,204 filing texts."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def size(n: int) -> str:
    """Bytes in words: 512 B, 48.2 KB, 156.9 MB, 2.1 GB (powers of 1,000)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} B"


def _moment(moment: Any) -> str:
    return str(moment.strftime("%Y-%m-%d %H:%M"))
