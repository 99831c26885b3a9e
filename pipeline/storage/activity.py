"""What the watchdog reads of a run: when a worker last wrote anything for it, and how many
times in a row it was resumed without progress."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from pipeline.storage.models import Chunk, DocStatus, Document, LLMCall, Run, aware


def last_activity(session: Session, run: Run) -> datetime:
    """When a worker last wrote anything for the run (its start when nothing yet), or until
    when one of its documents is leased, which is later: a lease is renewed only while its work
    makes progress, and a deferred document's lease waits for its retry (a provider's long
    pause, a daily quota: the limiter defers its calls, and no call is recorded meanwhile)."""
    moments = [
        session.scalar(
            select(func.max(Document.lease_expires_at)).where(
                Document.run_id == run.id, Document.status == DocStatus.RUNNING
            )
        ),
        session.scalar(select(func.max(Document.finished_at)).where(Document.run_id == run.id)),
        session.scalar(select(func.max(Chunk.completed_at)).where(Chunk.run_id == run.id)),
        session.scalar(select(func.max(LLMCall.created_at)).where(LLMCall.run_id == run.id)),
        run.started_at,
        run.created_at,
    ]
    return max(aware(m) for m in moments if m is not None)


def set_resumes(session: Session, run_id: str, resumes: int, resumed_at: datetime | None = None) -> None:
    """Count the run's resumes without progress (0: it moved again), and stamp the last one."""
    values: dict[str, object] = {"resumes": resumes}
    if resumed_at is not None:
        values["resumed_at"] = resumed_at
    session.execute(update(Run).where(Run.id == run_id).values(**values))
