"""A run's row, found by id or by a prefix of its id, and the newest runs.

Status moves go through `pipeline.storage.run_state.move_run`; this module only reads runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from pipeline.storage.models import Run


def get_run(session: Session, run_id: str) -> Run | None:
    return session.get(Run, run_id)


def newest_run_ids(session: Session, limit: int) -> list[str]:
    """The ids of the `limit` runs created last, newest first."""
    return list(session.scalars(select(Run.id).order_by(Run.created_at.desc()).limit(limit)))


def run_ids_starting(session: Session, prefix: str, limit: int) -> list[str]:
    """Up to `limit` ids of runs whose id starts with `prefix`."""
    return list(session.scalars(select(Run.id).where(Run.id.startswith(prefix)).limit(limit)))


def deadline(session: Session, run_id: str) -> datetime | None:
    """The run's deadline (None: it has none, or there is no such run)."""
    return session.scalar(select(Run.deadline).where(Run.id == run_id))


def lock_run(session: Session, run_id: str) -> Run | None:
    """The run's row, locked until the transaction ends (a cancel, a prune or a report waits)."""
    return session.get(Run, run_id, with_for_update=True)


def runs_with_status(
    session: Session, statuses: Sequence[str], run_ids: Sequence[str] | None = None
) -> list[Run]:
    """The runs in one of `statuses` (of `run_ids` only, when given)."""
    stmt = select(Run).where(Run.status.in_(list(statuses)))
    if run_ids is not None:
        stmt = stmt.where(Run.id.in_(list(run_ids)))
    return list(session.scalars(stmt))


def pruned_at(session: Session, run_id: str) -> datetime | None:
    """When the run's filing texts, chunks and call rows were pruned (None: never, or no such run)."""
    return session.scalar(select(Run.pruned_at).where(Run.id == run_id))
