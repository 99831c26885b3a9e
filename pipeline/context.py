"""The per-process services a task runs with (`Context`), and the checks every step of a run
makes through them: the cancel flag, the budget, the deadline.

A worker builds one `Context` at start (`workers.context`); the CLI builds one to run a step
in process. It sits above storage, the LLM client and leases, and below every step that uses
it (extraction, runs, reporting)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pipeline.core.settings import Settings
from pipeline.llm import stops
from pipeline.llm.client import CallSink, LLMClient
from pipeline.recovery.leases import Leases
from pipeline.storage import llm_calls, run_state, runs
from pipeline.storage.db import session_scope
from pipeline.storage.models import RunStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine


@dataclass
class Context:
    """What a worker process builds once and hands to every task."""

    settings: Settings
    engine: Engine
    llm: LLMClient
    leases: Leases = field(default_factory=Leases)
    """This process's name as a lease owner and the leases its threads hold (the heartbeat
    renews them)."""
    chunk_pool: ThreadPoolExecutor | None = None
    """Where a document's chunks are answered side by side (a worker's, as many threads as its
    concurrency); None: one after another."""
    escalation: LLMClient | None = None
    """The escalation model's client when it has an endpoint of its own
    (PIPELINE_ESCALATE_BASE_URL); None: `llm` asks it."""
    stopping: threading.Event = field(default_factory=threading.Event)
    """Set when the process is asked to stop (a worker's warm shutdown): a document's calls in
    flight finish and are stored, the chunks not begun go back to the queue with it."""


def escalation_llm(ctx: Context) -> LLMClient:
    """The client that asks PIPELINE_ESCALATE_MODEL (and the verification's second answers)."""
    return ctx.escalation or ctx.llm


def stop_check(ctx: Context, run_id: str) -> stops.Check | None:
    """The check made before each call for the run: its cancel flag, in the limiter's Redis,
    confirmed by the run's status in the database (a flag a cancel set after a retry took the
    run back is stale); None without Redis: the database's final status stops the work then."""
    if ctx.llm.limiter is None:
        return None

    def cancelled() -> bool:  # asked only when the flag is set
        with session_scope(ctx.engine) as session:
            return run_state.run_status(session, run_id) == RunStatus.CANCELLED

    return stops.StopFlags(ctx.llm.limiter.client).check_of(run_id, cancelled)


def recorded_spend(ctx: Context, run_id: str) -> tuple[float | None, float] | None:
    """The run's budget and recorded cost, from which `spend.check` opens its count."""
    with session_scope(ctx.engine) as session:
        return llm_calls.recorded_spend(session, run_id)


def check_spend(ctx: Context, run_id: str) -> None:
    """Raise BudgetSpent once the run has spent its budget: one Redis round trip (the spend is
    counted there as calls are made), Postgres only to open or reconcile the count."""
    ctx.llm.spend.check(run_id, lambda: recorded_spend(ctx, run_id))


def spending(ctx: Context, run_id: str, sink: CallSink, llm: LLMClient | None = None) -> CallSink:
    """`sink` for a capped run's calls (by `llm`, else the main client): each holds its largest
    cost against the run's budget before it is sent, and counts what it cost when it comes back;
    one that does not fit raises BudgetSpent (`pipeline.llm.spending`)."""
    return (llm or ctx.llm).spending(run_id, sink, lambda: recorded_spend(ctx, run_id))


def deadline_of(ctx: Context, run_id: str) -> Callable[[], datetime | None]:
    """Looks up the run's deadline: only once an outage holds a call (`pipeline.llm.circuit`)."""

    def look() -> datetime | None:
        with session_scope(ctx.engine) as session:
            return runs.deadline(session, run_id)

    return look


def database_url(engine: Engine) -> str:
    """The engine's URL for messages, its password masked."""
    return engine.url.render_as_string(hide_password=True)
