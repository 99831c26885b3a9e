"""Waiting for a run to end, with a progress bar on a terminal."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import Engine

from pipeline.runs.status import RunStatusView, run_status
from pipeline.storage.models import RunStatus

FINAL_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STALLED)
POLL_S = 0.5
REPORTING_POLL_S = 0.1
"""Once every document is final, the report is seconds away: the end is seen sooner."""


class WaitAborted(RuntimeError):
    pass


def wait_for_run(
    engine: Engine,
    run_id: str,
    console: Console,
    *,
    check: Callable[[], str | None] | None = None,
    timeout_s: float | None = None,
) -> RunStatusView:
    """Poll the run until it is completed or failed; `check` may abort the wait with a reason."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("extracting", total=None, detail="")
        while True:
            view = run_status(engine, run_id)
            failed = view.documents.get("failed", 0)
            phase = "reporting" if view.documents_done == view.documents_total else "extracting"
            progress.update(
                bar,
                description=phase,
                total=view.documents_total,
                completed=view.documents_done,
                detail=f"{failed} failed · {view.llm_calls} calls",
            )
            if view.status in FINAL_RUN_STATUSES:
                return view
            if check and (problem := check()):
                raise WaitAborted(problem)
            if deadline and time.monotonic() > deadline:
                raise WaitAborted(f"run {run_id} did not finish within {timeout_s:.0f} s")
            time.sleep(REPORTING_POLL_S if phase == "reporting" else POLL_S)
