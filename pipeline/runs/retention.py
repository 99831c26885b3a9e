"""Retention: the filing texts, chunks and LLM call rows of runs that ended long ago are
deleted (`pipeline prune`, and beat nightly with PIPELINE_RETENTION_DAYS); their extractions,
risk factors and reports stay, and so does what `pipeline status` shows of them (their calls,
tokens and cost are kept in `runs.pruned`). `everything` (`--all`) deletes the runs whole.

Only final runs (completed, failed, cancelled) are pruned; pending, running and stalled ones
are left whatever their age, and said so. Each run is marked first (`runs.pruned_at`, under
its row lock: `pipeline retry` refuses it from then on), then its documents are taken
DOCUMENTS_PER_TRANSACTION at a time, each batch in a transaction of its own, so a prune of
tens of thousands of filings holds no long lock and can stop anywhere: run again, it goes on
where it stopped, and once a run is complete a new prune leaves it alone.

Postgres reuses the space of deleted rows once VACUUM has been through them (autovacuum, or
`vacuum`); the files do not shrink (only VACUUM FULL would, under an exclusive lock).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from pipeline.storage import clock
from pipeline.storage import retention as repo
from pipeline.storage.db import session_scope
from pipeline.storage.retention import OldRun, Tally

if TYPE_CHECKING:
    from sqlalchemy import Engine

DOCUMENTS_PER_TRANSACTION = 200
"""Documents whose texts, chunks and calls go in one transaction: at most 200 MB of text at the
product's 1 MB a filing, a few thousand chunk and call rows."""

UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800, "y": 365 * 86_400}
"""A year is 365 days: a retention is a policy's round figure, and a day either way is no matter."""
UNIT_NAMES = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks", "y": "years"}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdwy])\s*$")


def parse_duration(given: str) -> float:
    """Seconds in "90d", "12h", "2w", "1y", "30m" or "45s"; ValueError with the accepted forms."""
    found = _DURATION.match(given.lower())
    if not found:
        raise ValueError(
            f"{given!r} is not a duration: give a number and a unit, as in 90d (days), 12h (hours), "
            "2w (weeks), 1y (365 days), 30m (minutes) or 45s (seconds)"
        )
    return float(found.group(1)) * UNITS_S[found.group(2)]


def duration_words(seconds: float) -> str:
    """90 days, 12 hours, 2 weeks, 2 years: the largest unit that divides it, else seconds."""
    for unit in ("y", "w", "d", "h", "m"):
        if seconds >= UNITS_S[unit] and seconds % UNITS_S[unit] == 0:
            count = seconds / UNITS_S[unit]
            return f"{count:g} {UNIT_NAMES[unit] if count != 1 else UNIT_NAMES[unit][:-1]}"
    return f"{seconds:g} seconds"


@dataclass
class PrunedRun:
    run_id: str
    name: str | None
    status: str
    ended: datetime
    tally: Tally = field(default_factory=Tally)
    refused: str | None = None
    """Why it was not pruned after all: it is no longer final (a retry started meanwhile), or
    ended since."""


@dataclass
class PruneOutcome:
    cutoff: datetime
    """Runs that ended before this (on the database's clock) are pruned."""
    older_than_s: float
    dry_run: bool
    everything: bool
    runs: list[PrunedRun] = field(default_factory=list)
    """The runs pruned (with `dry_run`: that would be), oldest first."""
    left: list[OldRun] = field(default_factory=list)
    """Old runs that are not final (pending, running, stalled): never pruned."""
    texts: Tally = field(default_factory=Tally)
    """`dry_run`: the texts that would go (the real prune counts them per run)."""

    @property
    def total(self) -> Tally:
        total = Tally()
        total.add(self.texts)
        for run in self.runs:
            total.add(run.tally)
        return total

    @property
    def pruned(self) -> list[PrunedRun]:
        return [run for run in self.runs if run.refused is None]


def prune_runs(
    engine: Engine,
    older_than_s: float,
    *,
    everything: bool = False,
    dry_run: bool = False,
    per_transaction: int = DOCUMENTS_PER_TRANSACTION,
    on_run: Callable[[PrunedRun], None] | None = None,
) -> PruneOutcome:
    """Prune the final runs that ended more than `older_than_s` ago (see the module's
    docstring); `dry_run`: count what would go and change nothing. `on_run` hears of each run
    as it is done."""
    with session_scope(engine) as session:
        cutoff = clock.now(session) - timedelta(seconds=older_than_s)
        old = repo.old_runs(session, cutoff)
    outcome = PruneOutcome(cutoff, older_than_s, dry_run, everything)
    outcome.left = [run for run in old if not run.final]
    todo = [run for run in old if run.final and (everything or not run.complete)]
    if dry_run:
        with session_scope(engine) as session:
            outcome.texts = repo.estimate_texts(session, cutoff)
            for run in todo:
                outcome.runs.append(
                    _entry(run, repo.estimate_run(session, run.run_id, everything=everything))
                )
        return outcome
    for run in todo:
        done = _prune_run(engine, run, cutoff, everything, per_transaction)
        outcome.runs.append(done)
        if on_run:
            on_run(done)
    return outcome


def _entry(run: OldRun, tally: Tally, refused: str | None = None) -> PrunedRun:
    return PrunedRun(run.run_id, run.name, run.status, run.ended, tally, refused)


def _prune_run(
    engine: Engine, run: OldRun, cutoff: datetime, everything: bool, per_transaction: int
) -> PrunedRun:
    with session_scope(engine) as session:
        refused = repo.begin(session, run.run_id, cutoff)
    if refused is not None:
        return _entry(run, Tally(), refused)
    tally, after = Tally(), 0
    while True:
        with session_scope(engine) as session:
            documents = repo.documents_after(session, run.run_id, after, per_transaction)
            if not documents:
                break
            ids = [document_id for document_id, _ in documents]
            hashes = [sha256 for _, sha256 in documents if sha256]
            tally.add(repo.drop_texts(session, hashes))
            tally.add(repo.delete_chunks_and_calls(session, ids))
            if everything:
                tally.add(repo.delete_documents(session, ids, hashes))
        after = ids[-1]
    while True:
        with session_scope(engine) as session:
            calls = repo.delete_run_calls(session, run.run_id)
        tally.add(calls)
        if not calls.calls:
            break
    with session_scope(engine) as session:
        if everything:
            tally.add(repo.delete_run(session, run.run_id))
        else:
            repo.finish(session, run.run_id, tally)
    return _entry(run, tally)


VACUUMED = ("contents", "chunks", "llm_calls")
VACUUMED_ALL = (*VACUUMED, "documents", "extractions", "risk_factors", "document_attempts", "reports", "runs")


def vacuum(engine: Engine, *, everything: bool = False) -> str:
    """Make the deleted rows' space reusable now, without waiting for autovacuum: a plain
    VACUUM (ANALYZE) of the pruned tables on Postgres, which reads and writes on while it runs
    (never VACUUM FULL, which locks the tables); SQLite's VACUUM, which rewrites the file (it
    shrinks; the database is locked meanwhile). What was run, in words."""
    return repo.vacuum(engine, VACUUMED_ALL if everything else VACUUMED)
