"""Reading results: `pipeline status`, `runs`, `report`, `eval`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.cli.base import console, fail, main, open_engine
from pipeline.core.settings import Settings, get_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.cli.status_page import StatusPage


@main.command()
@click.argument("run", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (its shape: docs/status.md).")
def status(run: str | None, as_json: bool) -> None:
    """Where RUN (default: the newest) stands, at a glance.

    A one-line summary, then the run's documents, calls, cost, mode, model and workers, why
    documents were not extracted (grouped and counted), the documents whose quotes were not all
    found, and the global limiter. Fits 80 columns; --json for scripts."""
    from pipeline.cli.status_json import status_json
    from pipeline.cli.status_view import render

    page = status_page(run, every_document=as_json)
    if as_json:
        click.echo(json.dumps(status_json(page), indent=2))
        return
    Console().print(render(page))


def status_page(run: str | None, *, every_document: bool = False) -> StatusPage:
    """Gather what `pipeline status` shows: the run from the database, workers and the limiter
    from Redis (left out, with the reason, when it does not answer). The page's table holds the
    few documents worth a look (read as such); `every_document` (--json): every document's
    grounding."""
    from pipeline.cli.status_page import StatusPage
    from pipeline.cli.status_tables import GROUNDING_ROWS
    from pipeline.runs.failures import run_failures
    from pipeline.runs.status import (
        UnknownRun,
        circuit_view,
        document_grounding,
        inbox_mismatch,
        limiter_views,
        resolve_run_id,
        run_status,
        worker_views,
    )

    settings = get_settings()
    engine = open_engine(settings)
    try:
        view = run_status(engine, resolve_run_id(engine, run))
    except UnknownRun as exc:
        fail(str(exc))
    workers = worker_views(settings)
    broker_down = bool(settings.redis_url) and workers is None
    if every_document:
        grounding, worth = document_grounding(engine, view.run_id)[0], None
    else:
        grounding, worth = document_grounding(engine, view.run_id, worth_only=True, limit=GROUNDING_ROWS)
    return StatusPage(
        view=view,
        failures=run_failures(engine, view.run_id),
        grounding=grounding,
        grounding_worth=worth,
        limiter=None if broker_down else limiter_views(settings),  # the rest is in the database
        workers=workers,
        broker_problem=broker_problem(settings) if broker_down else None,
        inbox_warning=inbox_mismatch(settings, workers),
        window_s=settings.rate_limit_window_s,
        notes=outage_notes(circuit_view(settings), view.llm_calls_held),
    )


def outage_notes(circuit: dict[str, Any] | None, held: int) -> list[tuple[str, str]]:
    """The endpoint's outage, as `status` says it: open now (since when, the probes, the next
    one, the last error), or the last one that ended; and the run's calls it held."""
    notes: list[tuple[str, str]] = []
    if circuit and circuit.get("state") in ("open", "probing"):
        notes.append(
            (
                "outage",
                f"the LLM endpoint has failed for {circuit.get('open_for_s') or 0:.0f} s: its circuit is "
                f"{circuit['state']} ({circuit.get('probes') or 0} probes failed, the next in "
                f"{circuit.get('next_probe_in_s') or 0:.0f} s); calls wait, none fails before "
                f"PIPELINE_OUTAGE_TOLERANCE_S; last error: {circuit.get('last_error') or 'none'}",
            )
        )
    elif circuit and circuit.get("last_outage_s"):
        notes.append(
            (
                "outage",
                f"the last one lasted {circuit['last_outage_s']:.0f} s, over at {circuit.get('last_closed_at')}",
            )
        )
    if held:
        notes.append(("held calls", f"{held:,} calls held by the open circuit, never sent"))
    return notes


def broker_problem(settings: Settings) -> str:
    from pipeline.cli.explain import redis_label

    return (
        f"{redis_label(settings.redis_url)} did not answer (PIPELINE_REDIS_URL): live workers and the "
        "global limiter are not shown; the rest comes from the database"
    )


@main.command()
@click.option("--limit", default=20, show_default=True, help="How many runs, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def runs(limit: int, as_json: bool) -> None:
    """The newest runs."""
    from pipeline.runs.status import list_runs

    views = list_runs(open_engine(get_settings()), limit, detail=as_json)
    if as_json:
        click.echo(json.dumps([v.as_dict() for v in views], indent=2))
        return
    if not views:
        console.print("no runs yet: `pipeline submit PATHS…` starts one")
        return
    from pipeline.cli.status_tables import runs_table

    Console().print(runs_table(views))


@main.command()
@click.argument("run", required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "json", "html", "csv"]),
    default=None,
    help="md: Markdown; json: the report's data; html: one page with charts; csv: the table of "
    "every document, one row each [default: the suffix of --output, else md].",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report to this file instead of printing it (out.html writes the page).",
)
def report(run: str | None, fmt: str | None, output: Path | None) -> None:
    """Print or write the report of RUN (default: the newest).

    `html`: one self-contained page with charts, opened offline. `csv`: every document of the
    run with its extraction, written as it is read (the report of a run of more than 200
    documents lists only those that need a look). With -o, the format follows the file's suffix
    (.md, .json, .html, .csv) unless --format names one."""
    from pipeline.runs.status import UnknownRun, resolve_run_id
    from pipeline.storage import reports
    from pipeline.storage import runs as run_rows
    from pipeline.storage.db import session_scope

    fmt = fmt or format_of(output)
    if output and not output.parent.is_dir():  # before any work: the user named a place that is not there
        fail(f"--output {output}: the directory {output.parent} does not exist; create it first")
    settings = get_settings()
    engine = open_engine(settings)
    try:
        run_id = resolve_run_id(engine, run)
    except UnknownRun as exc:
        fail(str(exc))
    if fmt == "csv":
        _write_documents(engine, run_id, output)
        return
    if fmt == "html":
        from pipeline.reporting.html import render_page
        from pipeline.reporting.page_data import NoReport, load_page

        try:
            text = render_page(load_page(engine, run_id, settings))
        except NoReport as exc:
            fail(str(exc))
    else:
        with session_scope(engine) as session:
            row = reports.get_report(session, run_id)
            if row is None:
                fail(f"run {run_id} has no report yet (see `pipeline status {run_id}`)")
            text = row.markdown if fmt == "md" else json.dumps(row.json, indent=2)
            pruned_at = run_rows.pruned_at(session, run_id)
        if pruned_at is not None:  # the report is as written; what it quoted from is gone
            console.print(
                f"run {run_id} was pruned on {pruned_at:%Y-%m-%d} (`pipeline prune`): its filing texts, "
                "chunks and call rows are gone; its report, extractions and risk factors are kept"
            )
    if output:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            fail(f"--output {output}: {exc.strerror or exc}")
        console.print(f"wrote {output}")
    else:
        click.echo(text)


def _write_documents(engine: Engine, run_id: str, output: Path | None) -> None:
    """The run's documents as CSV, to `output` or stdout, a page of rows at a time."""
    from pipeline.reporting.report_rows import write_csv

    if output is None:
        write_csv(engine, run_id, sys.stdout)
        return
    try:
        with output.open("w", encoding="utf-8", newline="") as out:
            written = write_csv(engine, run_id, out)
    except OSError as exc:
        fail(f"--output {output}: {exc.strerror or exc}")
    console.print(f"wrote {output} ({written:,} documents)")


SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".json": "json", ".csv": "csv"}


def format_of(output: Path | None) -> str:
    """The format `report -o` writes when --format names none: the file's suffix says it
    (out.html: the page, out.json: the data), anything else Markdown."""
    return SUFFIX_FORMATS.get(output.suffix.lower(), "md") if output else "md"


@main.command("eval")
@click.argument("run")
@click.option(
    "--truth",
    "truth_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Truth file in the format of examples/truth.json.",
)
@click.option(
    "--truth-from-xbrl",
    is_flag=True,
    help="Score against each filing's own facts instead of a truth file: its cover's company and "
    "fiscal year, its inline-XBRL total revenue. Filings that cannot be scored are named with the reason.",
)
@click.option(
    "--save-truth",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --truth-from-xbrl: also write that truth as a truth file.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option("--revenue-tolerance", default=0.01, show_default=True, help="Relative tolerance of revenue.")
@click.option(
    "--title-threshold",
    default=0.85,
    show_default=True,
    help="difflib ratio at which two risk-factor titles match (after normalising).",
)
@click.option("--grounded-only", is_flag=True, help="Count only facts whose quote was found in the filing.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the scores and the calibration (accuracy per confidence band, a reliability "
    "diagram) as a self-contained HTML page.",
)
def eval_(
    run: str,
    truth_path: Path | None,
    truth_from_xbrl: bool,
    save_truth: Path | None,
    as_json: bool,
    revenue_tolerance: float,
    title_threshold: float,
    grounded_only: bool,
    html_path: Path | None,
) -> None:
    """Score RUN's extractions against a truth file.

    Per filing (matched by file name) and overall, then accuracy per confidence band: are the
    fields scored higher right more often? A truth field that is null (a truth file made by
    `pipeline review truth`) is not scored."""
    from pipeline.reporting.eval_page import render_eval_page
    from pipeline.reporting.evaluate import evaluate, load_run, load_truth
    from pipeline.runs.status import UnknownRun, resolve_run_id

    engine = open_engine(get_settings())
    try:
        run_id = resolve_run_id(engine, run)
    except UnknownRun as exc:
        fail(str(exc))
    if (truth_path is None) == (not truth_from_xbrl):
        fail("give --truth FILE or --truth-from-xbrl (one of them)")
    unscorable: list[tuple[str, str]] = []
    if truth_path is not None:
        try:
            truths = load_truth(truth_path)
        except (ValueError, KeyError, TypeError) as exc:
            fail(f"cannot read the truth file {truth_path}: {exc!r}")
    else:
        from pipeline.reporting.xbrl_truth import truth_from_xbrl as from_xbrl

        truths, unscorable = from_xbrl(engine, run_id)
        if save_truth is not None:
            _save_truth(save_truth, truths)
    result = evaluate(
        truths,
        load_run(engine, run_id),
        revenue_tolerance=revenue_tolerance,
        title_threshold=title_threshold,
        grounded_only=grounded_only,
    )
    data = result.as_dict()
    if html_path is not None:
        try:
            html_path.write_text(render_eval_page(run_id, data, result.calibration()), encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write the page {html_path}: {exc.strerror or exc}")
    if truth_from_xbrl:
        data["not_scored_against_xbrl"] = [{"filename": n, "reason": r} for n, r in unscorable]
    if as_json:
        click.echo(json.dumps({"run_id": run_id, **data}, indent=2))
        return
    _print_eval(run_id, data)
    _print_calibration(data["calibration"])
    for name, reason in unscorable:
        console.print(f"revenue not scored against the filing's XBRL: {escape(name)}: {escape(reason)}")
    if html_path is not None:
        console.print(f"page: {escape(str(html_path))}")


def _save_truth(path: Path, truths: list[Any]) -> None:
    rows = [
        {
            "filename": t.filename,
            "company": t.company,
            "fiscal_year": t.fiscal_year,
            "revenue_usd": t.revenue_usd,
        }
        for t in truths
    ]
    try:
        path.write_text(json.dumps({"filings": rows}, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write the truth file {path}: {exc.strerror or exc}")


def _print_calibration(cal: dict[str, Any]) -> None:
    """Accuracy per confidence band, in all and per kind of field."""
    if not cal["fields"]:
        console.print("no scored field has a confidence (a custom schema, or a run from before confidence)")
        return
    kinds = list(cal["by_field"])
    table = Table("confidence", "fields", "accuracy", *kinds, title="accuracy per confidence band")
    for i, band in enumerate(cal["bands"]):
        per_kind = [cal["by_field"][k][i] for k in kinds]
        table.add_row(
            band["band"],
            str(band["fields"]),
            _percent(band["accuracy"]),
            *(f"{_percent(b['accuracy'])} of {b['fields']}" if b["fields"] else "" for b in per_kind),
        )
    Console(width=160).print(table)
    if cal["expected_calibration_error"] is not None:
        console.print(f"expected calibration error: {cal['expected_calibration_error']:.3f}")


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.0%}"


def _print_eval(run_id: str, data: dict[str, Any]) -> None:
    def mark(value: object) -> str:
        return (
            "yes" if value is True else "no" if value is False else "-" if value is None else f"{value:.2f}"
        )

    columns = [
        "filing",
        "company",
        "company (norm.)",
        "fiscal year",
        "revenue",
        "risk recall",
        "risk precision",
    ]
    title = f"eval of run {run_id} (revenue within {data['revenue_tolerance']:.1%}" + (
        ", grounded facts only)" if data["grounded_only"] else ")"
    )
    table = Table(*columns, title=title)
    for f in data["filings"]:
        name = escape(f["filename"]) + ("" if f["found"] else " (not in run)")
        keys = [
            "company_exact",
            "company_normalised",
            "fiscal_year",
            "revenue",
            "risk_recall",
            "risk_precision",
        ]
        table.add_row(name, *(mark(f[k]) for k in keys))
    overall = data["overall"]
    table.add_section()
    table.add_row(
        f"overall ({overall['found']} of {overall['filings']} found)",
        *(
            mark(overall[k])
            for k in [
                "company_exact",
                "company_normalised",
                "fiscal_year",
                "revenue",
                "risk_recall",
                "risk_precision",
            ]
        ),
    )
    Console(width=160).print(table)
    if data["unscored"]:
        console.print(f"not in the truth file, not scored: {escape(', '.join(data['unscored']))}")
