"""Finalize's decision, read from the database (never from the chord's results), so an early
or repeated delivery of the finalize task changes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pipeline.context import database_url
from pipeline.core.errors import DeletedFromDatabase, UnknownToDatabase
from pipeline.storage import run_state
from pipeline.storage.db import session_scope
from pipeline.storage.issued import deleted
from pipeline.storage.models import RunStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine


@dataclass(frozen=True)
class FinalizeStep:
    action: Literal["done", "stalled", "cancelled", "wait", "report"]
    """"done": the report exists; "stalled": the watchdog gave up on the run and documents are
    still unfinished (`pipeline resume` sends a new finalize; a stalled run whose documents all
    ended is reported); "cancelled": stopped on purpose, no report; "wait": documents are still
    being extracted, or the producer is still storing the run; "report": compress
    `compress_ids`, then synthesize."""
    compress_ids: list[int] = field(default_factory=list)


def next_step(engine: Engine, run_id: str, document_id: int | None = None) -> FinalizeStep:
    """What finalize does for the run now. Raises UnknownToDatabase when this database has no
    such run: a worker on another database than the producer's must neither report it nor
    take its report lock; DeletedFromDatabase when it has none and `document_id` (one of the
    run's, which the message carries) is an id it issued and deleted since: the run was deleted
    (`pipeline prune --all`), and the message ends. A run is never reported before the producer
    stored all of it: the first documents (sent early) may all end while later files are still
    being read."""
    with session_scope(engine) as session:
        status = run_state.run_status(session, run_id)
        if status is None:
            if document_id is not None and deleted(session, document_id):
                raise DeletedFromDatabase(f"run {run_id}", database_url(engine))
            raise UnknownToDatabase(f"run {run_id}", database_url(engine))
        if run_state.report_exists(session, run_id):
            return FinalizeStep("done")
        if status == RunStatus.CANCELLED:
            return FinalizeStep("cancelled")
        if not run_state.is_stored(session, run_id) or run_state.unfinished_count(session, run_id):
            return FinalizeStep("stalled" if status == RunStatus.STALLED else "wait")
        return FinalizeStep("report", run_state.extracted_ids(session, run_id, without_summary=True))


def ready_to_report(engine: Engine, document_id: int) -> str | None:
    """The document's run, when the producer has stored all of it, every document of it is
    final and it has no report yet: a delivery outside the run's chord (sent early, or again)
    that ended the run sends its finalize at once, instead of leaving it to the chord's
    finalize polling. (Early documents may all end while the producer still stores the rest.)"""
    with session_scope(engine) as session:
        run_id = run_state.run_of_document(session, document_id)
        if run_id is not None:
            run_state.revive(session, run_id)  # a stalled run whose document ended moves again
        if (
            run_id is None
            or run_state.report_exists(session, run_id)
            or run_state.unfinished_count(session, run_id)
        ):
            return None
        return run_id
