"""Report: each extraction's summary, and the run's report (which closes the run)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from pipeline.storage.fit import fitted
from pipeline.storage.models import (
    Extraction,
    Report,
    RunStatus,
    utcnow,
)
from pipeline.storage.run_state import move_run, unfinished_count
from pipeline.storage.runs import lock_run
from pipeline.storage.upsert import upsert


def save_summary(session: Session, document_id: int, summary: str) -> None:
    fitted_summary = fitted(Extraction, {"summary": summary})
    session.execute(update(Extraction).where(Extraction.document_id == document_id).values(**fitted_summary))


def save_report(
    session: Session,
    run_id: str,
    markdown: str,
    data: dict[str, Any],
    status: RunStatus,
    error: str | None = None,
) -> bool:
    """The run's report, which closes the run with `status`: written under the run's row lock,
    and only while every document of the run is final. False (nothing written): a `pipeline
    retry` sent documents back while the report was being made (it takes the same lock); the
    retry's finalize writes the report once they end."""
    lock_run(session, run_id)
    if unfinished_count(session, run_id):
        return False
    row = fitted(Report, {"run_id": run_id, "markdown": markdown, "json": data, "created_at": utcnow()})
    upsert(session, Report, [row], ["run_id"], ["markdown", "json", "created_at"])
    move_run(session, run_id, "report", status, error)
    return True


def keep_report(session: Session, run_id: str, markdown: str, data: dict[str, Any]) -> bool:
    """The report of a run that is not closed by it (a cancelled run's: what was done before
    the cancel); the run's status stays as it is. Under the run's row lock, and only while the
    run is still cancelled (False: a retry took it back meanwhile, and reports it later)."""
    run = lock_run(session, run_id)
    if run is None or run.status != RunStatus.CANCELLED:
        return False
    row = fitted(Report, {"run_id": run_id, "markdown": markdown, "json": data, "created_at": utcnow()})
    upsert(session, Report, [row], ["run_id"], ["markdown", "json", "created_at"])
    return True


def drop_report(session: Session, run_id: str) -> bool:
    """Remove the run's report, which `pipeline retry` replaces: finalize writes the new one
    once the retried documents end (a run with a report is done for finalize). Whether there
    was one."""
    dropped = session.execute(delete(Report).where(Report.run_id == run_id))
    return bool(dropped.rowcount)  # type: ignore[attr-defined]


def amend_report(session: Session, run_id: str, markdown: str, data: dict[str, Any]) -> None:
    """The run's report rewritten (its totals, once the calls that came after it are recorded);
    when it was written and the run's status stay as they are."""
    session.execute(update(Report).where(Report.run_id == run_id).values(markdown=markdown, json=data))


def get_report(session: Session, run_id: str) -> Report | None:
    """The run's report row (None: none written yet)."""
    return session.scalar(select(Report).where(Report.run_id == run_id))
