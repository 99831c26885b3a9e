"""Following a run to its end (`submit --wait`, `resume --wait`, `pipeline run`), and the report
files written when it ends."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.markup import escape

from pipeline.cli.base import (
    console,
    interrupts_unwrapped,
    open_engine,
    outcome,
    raise_if_terminated,
    stopped_by,
)
from pipeline.core import exits
from pipeline.core.settings import Settings, get_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine


def follow(engine: Engine, run_id: str, check: Callable[[], str | None] | None = None) -> int:
    """Show the run's progress until it ends (or the user stops waiting); the exit code: 4 when
    the run is stuck (its workers go on with it, and `pipeline status` follows it). `check` is
    the embedded stack's (`pipeline run`), whose workers stop when this command ends."""
    try:
        with interrupts_unwrapped():  # rich.progress builds classes: a signal can land there
            from pipeline.runs.progress import WaitAborted, WaitStuck, wait_for_run
    except KeyboardInterrupt as exc:
        return _stopped_waiting(run_id, check, exc)

    def checked() -> str | None:
        raise_if_terminated()
        return check() if check is not None else None

    try:
        with interrupts_unwrapped():
            view = wait_for_run(engine, run_id, console, get_settings(), check=checked)
    except WaitStuck as exc:
        console.print(f"[bold red]error:[/] run {run_id} is stuck: {escape(str(exc))}")
        goes_on = "the run goes on" if check is None else "the local workers stop with this command"
        console.print(f"stopped waiting; {goes_on}: follow it with `pipeline status {run_id}`")
        return exits.STUCK
    except WaitAborted as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 1
    except KeyboardInterrupt as exc:
        return _stopped_waiting(run_id, check, exc)
    from pipeline.runs.failures import run_failures

    code = outcome(view, run_failures(engine, run_id))
    if check is None and view.has_report:  # `pipeline run` writes its own, with its embedded parts
        write_report_files(get_settings(), run_id, page=False)
    return code


def _stopped_waiting(run_id: str, check: Callable[[], str | None] | None, exc: KeyboardInterrupt) -> int:
    if check is not None:  # `pipeline run`: its workers stop with it, and it marks the run
        raise RunInterrupted(run_id, stopped_by(exc)) from None
    console.print(f"stopped waiting ({stopped_by(exc)}); the run goes on: pipeline status {run_id}")
    return exits.INTERRUPTED


class RunInterrupted(KeyboardInterrupt):
    """`pipeline run` was stopped while it followed its run."""

    def __init__(self, run_id: str, how: str) -> None:
        super().__init__(run_id, how)
        self.run_id, self.how = run_id, how


def write_report_files(settings: Settings, run_id: str, *, page: bool = True) -> None:
    """The report as `.md`, `.json` and (with `page`) `.html` under the data directory's
    `reports/`, the table of every document as `<run id>-documents.csv` beside them (written as
    it is read), and the line naming them (while `pipeline run`'s embedded Redis still runs: the
    page shows the limits the run learned from the provider). Without `page` the line names
    the command that writes it: its charts take seconds of CPU, which a `submit --wait` in a
    script need not pay. A directory that cannot be written is named, with the command that
    prints the report instead."""
    from pipeline.cli.status_page import SHORT_ID
    from pipeline.reporting.render import documents_csv
    from pipeline.reporting.report_rows import write_csv
    from pipeline.storage.db import session_scope
    from pipeline.storage.reports import get_report

    engine = open_engine(settings)
    out = settings.data_dir.resolve() / "reports"
    with session_scope(engine) as session:
        row = get_report(session, run_id)
        if row is None:
            return
        markdown, data = row.markdown, row.json
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{run_id}.md").write_text(markdown, encoding="utf-8")
        (out / f"{run_id}.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
        with (out / documents_csv(run_id)).open("w", encoding="utf-8", newline="") as table:
            write_csv(engine, run_id, table)  # a page of rows at a time
    except OSError as exc:
        console.print(
            f"[yellow]the report could not be written to {escape(str(out))}:[/] {escape(exc.strerror or str(exc))} "
            f"(PIPELINE_DATA_DIR); print it with `pipeline report {run_id}`"
        )
        return
    if not page:
        console.print(
            f"report: {out / f'{run_id}.md'} (and .json, -documents.csv; the page: "
            f"pipeline report {run_id[:SHORT_ID]} -o {run_id[:SHORT_ID]}.html)"
        )
        return
    from pipeline.reporting.html import render_page  # matplotlib: seconds of CPU, for the page only
    from pipeline.reporting.page_data import load_page

    try:
        html = render_page(load_page(engine, run_id, settings))
        (out / f"{run_id}.html").write_text(html, encoding="utf-8")
    except Exception as exc:  # the run is done and its report written: say so, and go on
        console.print(f"[yellow]the HTML page could not be written:[/] {escape(repr(exc))}")
        console.print(f"report: {out / f'{run_id}.md'} (and .json, -documents.csv)")
        return
    console.print(f"report: {out / f'{run_id}.md'} (and .json, .html, -documents.csv)")
