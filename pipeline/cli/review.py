"""The review loop: `pipeline review export`, `import` and `truth`.

Fields the model was least sure of go out as a sheet (HTML to fill in a browser, or CSV for a
spreadsheet), come back as corrections (the views `reviewed_extractions` and
`reviewed_risk_factors` read the newest over the model's values), and make a truth file for
`pipeline eval`.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pipeline.cli.base import console, fail, main, open_engine
from pipeline.core.settings import get_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.reporting.review_sheet import ReviewItem
    from pipeline.storage.corrections import FieldRow


@main.group()
def review() -> None:
    """Check low-confidence fields by hand: export a sheet, import its corrections, write truth.

    `export` writes the fields of a run below a confidence as an HTML sheet and a CSV; `import`
    stores what a reviewer saved from either; `truth` writes the reviewed values as a truth
    file for `pipeline eval`."""


def _run_id(engine: Engine, run: str) -> str:
    from pipeline.runs.status import UnknownRun, resolve_run_id

    try:
        return resolve_run_id(engine, run)
    except UnknownRun as exc:
        fail(f"{exc}: `pipeline runs` lists the runs of this database (PIPELINE_DATABASE_URL)")


@review.command("export")
@click.argument("run")
@click.option(
    "--below",
    default=0.7,
    show_default=True,
    type=click.FloatRange(0.0, 1.0),
    help="List the fields whose confidence is below this.",
)
@click.option(
    "--out",
    "out_dir",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The directory to write review-RUN8.html and review-RUN8.csv in.",
)
def export(run: str, below: float, out_dir: Path) -> None:
    """Write a review sheet of RUN's low-confidence fields.

    The fields with a confidence below --below, lowest first. review-RUN8.html is one page, opened offline, to correct or confirm each field and save the
    corrections as JSON; review-RUN8.csv holds the same items for a spreadsheet (fill in the
    `correction` column: the value, `none` for no value, or the value again to confirm it).
    Fields without a confidence (a custom schema) are not listed."""
    from pipeline.reporting.review_sheet import lowest_first, sheet_csv, sheet_html

    if not out_dir.is_dir():
        fail(f"--out {out_dir}: the directory does not exist; create it first")
    engine = open_engine(get_settings())
    run_id = _run_id(engine, run)
    items, unscored = _items(engine, run_id, below)
    if not items:
        why = f" ({unscored} extractions have no confidence: a custom schema)" if unscored else ""
        console.print(f"no field of run {run_id} has a confidence below {below:g}{why}: no sheet written")
        return
    items = lowest_first(items)
    html_path, csv_path = out_dir / f"review-{run_id[:8]}.html", out_dir / f"review-{run_id[:8]}.csv"
    try:
        html_path.write_text(sheet_html(run_id, below, items, datetime.now(UTC)), encoding="utf-8")
        # utf-8-sig: a spreadsheet reads the BOM as "this CSV is UTF-8" (company names have accents)
        csv_path.write_text(sheet_csv(items), encoding="utf-8-sig", newline="")
    except OSError as exc:
        fail(f"--out {out_dir}: {exc.strerror or exc}")
    console.print(f"{len(items)} fields of run {run_id} below {below:g}: {html_path}, {csv_path}")


def _items(engine: Engine, run_id: str, below: float) -> tuple[list[ReviewItem], int]:
    """The review items below `below`, each document's text read once; and, when there are
    none, how many extractions have no confidence at all."""
    from pipeline.reporting.review_sheet import items_of
    from pipeline.storage import corrections
    from pipeline.storage.db import session_scope

    with session_scope(engine) as session:
        by_document: dict[int, list[FieldRow]] = defaultdict(list)
        for row in corrections.fields_below(session, run_id, below):
            by_document[row.document_id].append(row)
        items = [
            item
            for rows in by_document.values()
            for item in items_of(rows, *corrections.filing_text(session, rows[0].sha256))
        ]
        unscored = 0 if items else corrections.unscored_extractions(session, run_id)
    return items, unscored


@review.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--reviewer", help="Who reviewed, where the file names nobody [default: $USER].")
def import_(file: Path, reviewer: str | None) -> None:
    """Store the corrections a reviewer saved in FILE.

    FILE is the JSON the sheet saves, or its CSV filled in. Every row is checked before anything is stored (its document is in the run and has the
    field, a fiscal year is a year, a revenue an amount): one problem and nothing is stored. A
    reviewed row whose value is unchanged confirms it. The reviewer is the file's, else
    --reviewer, else $USER; the time is the import's (the database's clock), so the review
    imported last wins, and a correction that the field's newest already says is not stored
    again."""
    from pipeline.reporting.review_import import ReviewFileError, check, corrections_of, read_review
    from pipeline.storage import clock, corrections, runs
    from pipeline.storage.db import session_scope

    try:
        review_file = read_review(file)
    except ReviewFileError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{file}: {exc.strerror or exc}")
    if not review_file.entries:
        console.print(
            f"{file.name}: no row is reviewed (a correction, or ticked in the sheet): nothing stored"
        )
        return
    engine = open_engine(get_settings())
    with session_scope(engine) as session:  # one transaction: all of the file or nothing
        if review_file.run_id is not None and runs.get_run(session, review_file.run_id) is None:
            fail(f"{file.name}: run {review_file.run_id} is not in this database (PIPELINE_DATABASE_URL)")
        found = corrections.targets(session, [e.document_id for e in review_file.entries])
        try:
            run_id = check(review_file, found)
            imported_at = clock.now(session)
            rows = corrections_of(review_file, run_id, reviewer or os.environ.get("USER"), imported_at)
        except ReviewFileError as exc:
            fail(str(exc))
        stored, again = corrections.store(session, rows)
    confirmed = sum(e.confirms for e in review_file.entries)
    console.print(
        f"{file.name}: stored {stored} of {len(rows)} reviewed fields of run {run_id} "
        f"({_count(len(rows) - confirmed, 'correction')}, {_count(confirmed, 'confirmation')})"
        + (f"; {again} were already stored" if again else "")
    )


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


@review.command("truth")
@click.argument("run")
@click.option(
    "--output",
    "-o",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The truth file to write (JSON, the format of examples/truth.json).",
)
def truth(run: str, output: Path) -> None:
    """Write RUN's reviewed values as a truth file for eval.

    One filing per document with a reviewed company, fiscal year or revenue (the newest
    correction of each). A field not reviewed is null, which eval does not score, and so is a
    field reviewed as having no value; risk factors are left out (a review of some titles is
    not a filing's whole list)."""
    from pipeline.reporting.review_import import truth as truth_file
    from pipeline.storage import corrections
    from pipeline.storage.db import session_scope

    if not output.parent.is_dir():
        fail(f"--output {output}: the directory {output.parent} does not exist; create it first")
    engine = open_engine(get_settings())
    run_id = _run_id(engine, run)
    with session_scope(engine) as session:
        data = truth_file(corrections.reviewed_scalars(session, run_id))
    if not data["filings"]:
        fail(
            f"run {run_id} has no reviewed company, fiscal year or revenue: "
            "`pipeline review export` and `pipeline review import` first"
        )
    try:
        output.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        fail(f"--output {output}: {exc.strerror or exc}")
    console.print(f"wrote {output}: {_count(len(data['filings']), 'reviewed filing')} of run {run_id}")
