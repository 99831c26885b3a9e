"""Calls that cannot be recorded because what they were for was deleted while they were in flight
(`pipeline prune --all` of a just-cancelled run, a run deleted): they were paid, and their row
would name a document or run that is gone (a foreign-key error that failed the whole write).

Their row is left out and one WARNING says what they cost, so the spend is not silent; the run
they belonged to, and with it its ledger, no longer exists.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pipeline.storage.models import Document, Run

log = logging.getLogger(__name__)


def insert_rows(session: Session, calls: Table, run_id: str, rows: Sequence[dict[str, Any]]) -> bool:
    """Insert the calls' rows (in a savepoint of the caller's transaction); False when the run
    or a document they name was deleted meanwhile: nothing is inserted, and the calls' cost is
    said at WARNING. Any other integrity error is raised."""
    try:
        with session.begin_nested():
            session.execute(insert(calls), list(rows))
    except IntegrityError:
        gone = _gone(session, run_id, rows)
        if gone is None:
            raise
        _say(gone, rows)
        return False
    return True


def _gone(session: Session, run_id: str, rows: Sequence[dict[str, Any]]) -> str | None:
    """What of the rows' run and documents the database no longer holds, in words; None: all there."""
    if session.scalar(select(func.count()).where(Run.id == run_id)) == 0:
        return f"run {run_id}"
    named = {row["document_id"] for row in rows if row["document_id"] is not None}
    held = set(session.scalars(select(Document.id).where(Document.id.in_(named)))) if named else set()
    missing = sorted(named - held)
    if not missing:
        return None
    return f"document{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of run {run_id}"


def _say(gone: str, rows: Sequence[dict[str, Any]]) -> None:
    tokens = sum(row["prompt_tokens"] + row["completion_tokens"] for row in rows)
    priced = [row["cost_usd"] for row in rows if row["cost_usd"] is not None]
    cost = f"${sum(priced):.4f}" if priced else "no price known"
    log.warning(
        "%d LLM call%s of %s, deleted from the database while in flight (`pipeline prune --all`, "
        "or the run deleted): paid and not recorded (%d tokens, %s)",
        len(rows),
        "" if len(rows) == 1 else "s",
        gone,
        tokens,
        cost,
    )
