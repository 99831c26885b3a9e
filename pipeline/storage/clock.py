"""The one clock of every recovery decision: a lease's expiry, a reclaim, a quiet period, a stall.

It is the database's (Postgres `statement_timestamp()`), so hosts whose wall clocks are minutes
apart, in either direction, agree on when a lease ran out; Redis-side decisions use Redis `TIME`
or key TTLs, which are Redis's clock. SQLite is one host's file (the embedded run): that host's
clock is the only one there.

`now` is also the seam through which tests move time (`moved`), instead of sleeping through a
lease: every decision that reads the clock reads it here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

_shift = timedelta(0)


def now(session: Session) -> datetime:
    """The database's time (UTC), as this process's decisions see it."""
    found = None
    if session.get_bind().dialect.name == "postgresql":
        found = session.scalar(select(func.statement_timestamp()))
    moment = found if isinstance(found, datetime) else datetime.now(UTC)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)) + _shift


@contextmanager
def moved(seconds: float) -> Iterator[None]:
    """Tests: while the block runs, this process's decisions see the clock `seconds` later (a
    lease runs out, a run goes quiet) without waiting for it. Other processes are not moved."""
    global _shift
    before = _shift
    _shift = before + timedelta(seconds=seconds)
    try:
        yield
    finally:
        _shift = before
