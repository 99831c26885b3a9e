"""Every LLM call's record (tokens, latency, cost), and the run's budget checked against them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from pipeline.core.constants import CALL_HELD
from pipeline.core.errors import BudgetSpent
from pipeline.storage import clock, unrecorded
from pipeline.storage.models import LLMCall, Run, table_of

if TYPE_CHECKING:
    from pipeline.llm.client import CallRecord


_CALLS = table_of(LLMCall)
_RUNS = table_of(Run)
_ADD_COST = (
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("cost_of"))
    .values(cost_usd=_RUNS.c.cost_usd + bindparam("spent"))
)


def record_calls(
    session: Session,
    run_id: str,
    document_id: int | None,
    chunk_idx: int | None,
    records: Iterable[CallRecord],
) -> None:
    insert_calls(session, run_id, [call_values(run_id, document_id, chunk_idx, r) for r in records])


def insert_calls(session: Session, run_id: str, rows: Sequence[dict[str, Any]]) -> None:
    """Calls' rows (`call_values`) of one run, and their cost added to the run's. Core
    statements, not ORM objects: a row per call attempt on every document's hot path."""
    if not rows:
        return
    at = clock.now(session)  # the watchdog's idle time is read on this clock
    if not unrecorded.insert_rows(session, _CALLS, run_id, [{**row, "created_at": at} for row in rows]):
        return  # what they were for was deleted while they were in flight: said, with their cost
    spent = sum(row["cost_usd"] or 0.0 for row in rows)
    if spent:
        session.execute(_ADD_COST, {"cost_of": run_id, "spent": spent})


def call_values(
    run_id: str,
    document_id: int | None,
    chunk_idx: int | None,
    r: CallRecord,
    sync_cost_usd: float | None = None,
) -> dict[str, Any]:
    """A call's row as column values; `sync_cost_usd` is what its tokens cost at synchronous
    prices (a batch call's; else the record's, a flex call's; else its own cost)."""
    return {
        "run_id": run_id,
        "document_id": document_id,
        "chunk_idx": chunk_idx,
        "stage": r.stage,
        "model": r.model,
        "status": r.status,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "cached_tokens": r.cached_tokens,
        "latency_ms": r.latency_ms,
        "error": r.error,
        "key_slot": r.key_slot,
        "limiter_wait_ms": r.limiter_wait_ms,
        "cost_usd": r.cost_usd,
        "mode": r.mode,
        "sync_cost_usd": _first_known(sync_cost_usd, r.sync_cost_usd, r.cost_usd),
    }


def _first_known(*costs: float | None) -> float | None:
    return next((c for c in costs if c is not None), None)


@dataclass(frozen=True)
class CallTotals:
    """A run's recorded calls: what `status`, `submit --wait`, the report's header and its HTML
    page all show, so that one run never has two totals."""

    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    """Sum over the priced calls; None when none was priced."""
    priced_calls: int
    failed_calls: int = 0
    """Calls that brought no usable answer (any status but ok)."""
    held_calls: int = 0
    """Calls an open circuit held (`CALL_HELD`): never sent, so neither in `calls` nor failed."""
    cached_tokens: int = 0
    """Of `prompt_tokens`, those the provider served from its prompt cache (priced as cached)."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def call_totals(session: Session, run_id: str) -> CallTotals:
    """The run's calls, tokens and cost, counted from its `llm_calls` rows (every HTTP attempt;
    the calls an open circuit held apart)."""
    sent = _CALLS.c.status != CALL_HELD
    calls, prompt, completion, cost, priced, failed, held, cached = session.execute(
        select(
            func.count(_CALLS.c.id).filter(sent),
            func.coalesce(func.sum(_CALLS.c.prompt_tokens), 0),
            func.coalesce(func.sum(_CALLS.c.completion_tokens), 0),
            func.sum(_CALLS.c.cost_usd),
            func.count(_CALLS.c.cost_usd),
            func.count(_CALLS.c.id).filter(sent, _CALLS.c.status != "ok"),
            func.count(_CALLS.c.id).filter(_CALLS.c.status == CALL_HELD),
            func.coalesce(func.sum(_CALLS.c.cached_tokens), 0),
        ).where(_CALLS.c.run_id == run_id)
    ).one()
    return CallTotals(
        held_calls=int(held),
        calls=int(calls),
        prompt_tokens=int(prompt),
        completion_tokens=int(completion),
        cost_usd=None if cost is None else round(float(cost), 6),
        priced_calls=int(priced),
        failed_calls=int(failed),
        cached_tokens=int(cached),
    )


def recorded_spend(session: Session, run_id: str) -> tuple[float | None, float] | None:
    """The run's budget (None: no cap) and its recorded cost, in USD; None when there is no such
    run. What `SpendMeter.check` opens and reconciles its Redis count from."""
    row = session.execute(select(Run.budget_usd, Run.cost_usd).where(Run.id == run_id)).one_or_none()
    return None if row is None else (row.budget_usd, row.cost_usd)


def check_budget(session: Session, run_id: str) -> None:
    """Raise BudgetSpent once the run's recorded cost reached its budget."""
    found = recorded_spend(session, run_id)
    if found is not None and found[0] is not None and found[1] >= found[0]:
        raise BudgetSpent(f"budget: the run spent ${found[1]:.4f} of its ${found[0]:.4f}")
