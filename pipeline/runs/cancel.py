"""Cancelling a run (`pipeline cancel`): it spends nothing more.

In this order, each step safe to repeat (a second cancel finishes what a first one interrupted):

1. the database, in one transaction: the run `cancelled` with the reason, and its unfinished
   documents `cancelled` with theirs (their fence raised: a holder still at work writes nothing
   more, and no delivery starts them again: a queued extract finds its document final and does
   nothing);
2. the run's flag in Redis (`pipeline.llm.stops`): every call for the run is checked right
   before it goes out, so the calls already admitted by the limiter are not sent either;
3. its batches at the provider: cancelled (what they completed comes back all the same, and
   the batch poll ingests it: it was paid for), those not sent yet dropped.

The report of what was done is written by the caller (`reporting.synthesize.report_cancelled`:
the reporting layer is above this one); the run stays `cancelled`. `pipeline retry` finishes it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis

from pipeline.core.settings import Settings
from pipeline.llm.batch import BatchAPI
from pipeline.llm.stops import StopFlags
from pipeline.runs.batching import cancel_open_batches
from pipeline.storage import batches, run_documents, run_state, runs
from pipeline.storage.db import session_scope
from pipeline.storage.models import RunStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)


@dataclass
class CancelOutcome:
    run_id: str
    status: str
    """The run's status once the cancel is done (`cancelled`, or the one it had ended in)."""
    already: bool = False
    """The run was cancelled before: this cancel changed nothing in the database."""
    ended: bool = False
    """The run had ended (completed or failed): there was nothing to cancel."""
    reason: str | None = None
    """Why the run is cancelled (the first cancel's reason, for a repeated one)."""
    documents: int = 0
    """Documents this cancel ended `cancelled`."""
    extracted: int = 0
    total: int = 0
    batches: list[str] = field(default_factory=list)
    """Provider batches this cancel cancelled."""
    batch_errors: list[str] = field(default_factory=list)
    """Batches the provider could not be asked to cancel (they may still spend: cancel again)."""
    flag_error: str | None = None
    """The workers' check before each call could not be told (Redis): only the database stops
    them, at their next write."""


def document_reason(by: str) -> str:
    """What a document the cancel left unfinished says (`documents.error`)."""
    return f"cancelled by {by} before it was extracted"


def cancel_run(
    engine: Engine,
    settings: Settings,
    run_id: str,
    by: str,
    flags: StopFlags | None,
    *,
    hint: str = "",
) -> CancelOutcome:
    """Cancel the run (see the module's docstring). `by`: who cancels it and why, in words
    ("`pipeline cancel` on host-1: wrong inbox"); `hint`: what to do next, for the run's error;
    `flags`: the Redis of the workers' check (None: none reachable, as after `pipeline run`
    stopped its embedded Redis)."""
    outcome = _cancel_in_database(engine, run_id, by, hint)
    if outcome.ended:
        return outcome
    if flags is not None:
        try:
            flags.stop(run_id, document_reason(by))
        except redis.RedisError as exc:  # the database has it: said, and the batches still go
            outcome.flag_error = f"{type(exc).__name__}: {exc}"
    _cancel_batches(engine, settings, outcome)
    return outcome


def _cancel_in_database(engine: Engine, run_id: str, by: str, hint: str) -> CancelOutcome:
    """Step 1, in one transaction (the run's row locked first: a retry or a report waits)."""
    with session_scope(engine) as session:
        run = runs.lock_run(session, run_id)
        if run is None:
            raise LookupError(f"no run {run_id}")
        outcome = CancelOutcome(run_id, run.status)
        counts = run_state.status_counts(session, run_id)
        outcome.extracted, outcome.total = counts.get("extracted", 0), sum(counts.values())
        if run.status in (RunStatus.COMPLETED, RunStatus.FAILED):
            outcome.ended = True
            return outcome
        outcome.already = run.status == RunStatus.CANCELLED
        if outcome.already:
            outcome.reason = run.error
        else:
            outcome.reason = (
                f"cancelled by {by}; {outcome.extracted} of {outcome.total} documents were extracted"
                + (f"; {hint}" if hint else "")
            )
            run_state.move_run(session, run_id, "cancel", error=outcome.reason)
        outcome.documents = run_documents.cancel_documents(session, run_id, document_reason(by))
        outcome.status = RunStatus.CANCELLED
    return outcome


def _cancel_batches(engine: Engine, settings: Settings, outcome: CancelOutcome) -> None:
    """Step 3: the run's open batches at the provider (none: no call to the provider)."""
    with session_scope(engine) as session:
        open_rows = batches.open_batches(session, outcome.run_id)
    if not open_rows:
        return
    if not settings.llm_base_url:
        outcome.batch_errors.append("no endpoint configured (PIPELINE_LLM_BASE_URL) to cancel them at")
        return
    api = BatchAPI(settings.llm_base_url, settings.api_key_value(), settings.llm_timeout_s)
    try:
        done = cancel_open_batches(engine, api, outcome.run_id, "run cancelled")
    finally:
        api.close()
    outcome.batches, outcome.batch_errors = done.cancelled, done.failed
