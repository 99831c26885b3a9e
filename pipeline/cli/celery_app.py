"""The CLI's one door to the Celery layer (`workers`): sending runs, starting Celery programs.

Each function imports `workers` when called, so that importing any `pipeline` module (this one
included) never loads Celery, and the commands that need no broker (`status`, `report`, `eval`,
…) stay fast. import-linter allows `workers` here only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.core.settings import Settings
    from pipeline.ingest.producer import SubmitPlan
    from pipeline.runs.resume import ResumePlan
    from pipeline.runs.watchdog import Verdict

log = logging.getLogger(__name__)


def start(argv: list[str]) -> Any:
    """Run a Celery program (`beat`, `flower`, …) of the pipeline's app with `argv`."""
    from workers.app import app

    return app.start(argv)


def worker_main(argv: list[str]) -> None:
    """Run a Celery worker of the pipeline's app with `argv` (in the foreground)."""
    from workers.app import app

    app.worker_main(argv)


_connecting: threading.Thread | None = None


def connect_in_background() -> None:
    """Load Celery and connect to the broker on a thread of its own, while the producer stores
    the run's first files (about a second that the first documents would wait otherwise). The
    senders below wait for it: importing Celery from two threads at once can deadlock on its
    circular imports."""
    global _connecting

    def connect() -> None:
        try:
            from workers.app import app

            with app.producer_or_acquire() as producer:
                producer.connection.ensure_connection(max_retries=1)
        except Exception as exc:  # the send itself reports a broker that is down
            log.debug("no broker connection ahead of the send: %s", exc)

    _connecting = threading.Thread(target=connect, name="pipeline-broker-connect", daemon=True)
    _connecting.start()


def _connected() -> None:
    if _connecting is not None:
        _connecting.join()


def enqueue_run(run_id: str, document_ids: Sequence[int]) -> str:
    """Send the run's chord (ids only); returns the chord's result id."""
    _connected()
    from workers.canvas import enqueue_run as send

    return send(run_id, document_ids)


def start_run(engine: Engine, settings: Settings, plan: SubmitPlan) -> str:
    """Decide the stored run's mode and send it (the chord, or the batch path's poll)."""
    _connected()
    from workers.canvas import start_run as send

    return send(engine, settings, plan)


def enqueue_early(document_ids: Sequence[int]) -> None:
    """Send a run's first documents while the rest is still being stored."""
    _connected()
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
