"""The CLI's one door to the Celery layer (`workers`): sending runs, starting Celery programs.

Each function imports `workers` when called, so that importing any `pipeline` module (this one
included) never loads Celery, and the commands that need no broker (`status`, `report`, `eval`,
…) stay fast. import-linter allows `workers` here only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.core.settings import Settings
    from pipeline.runs.resume import ResumePlan
    from pipeline.runs.watchdog import Verdict


def start(argv: list[str]) -> Any:
    """Run a Celery program (`beat`, `flower`, …) of the pipeline's app with `argv`."""
    from workers.app import app

    return app.start(argv)


def worker_main(argv: list[str]) -> None:
    """Run a Celery worker of the pipeline's app with `argv` (in the foreground)."""
    from workers.app import app

    app.worker_main(argv)


def enqueue_run(run_id: str, document_ids: Sequence[int]) -> str:
    """Send the run's chord (ids only); returns the chord's result id."""
    from workers.canvas import enqueue_run as send

    return send(run_id, document_ids)


def enqueue_early(document_ids: Sequence[int]) -> None:
    """Send a run's first documents while the rest is still being stored."""
    from workers.canvas import enqueue_early as send

    send(document_ids)


def enqueue_resume(plan: ResumePlan) -> None:
    """Send what a resume plan says: its documents and finalize, or finalize alone."""
    from workers.canvas import enqueue_resume as send

    send(plan)


def resume_idle_runs(engine: Engine, settings: Settings) -> list[Verdict]:
    """One watchdog pass, enqueueing the resumes it decides; returns every verdict."""
    from workers.canvas import resume_idle_runs as resume

    return resume(engine, settings)
