"""Every LLM call's record (tokens, latency, cost), and the run's budget checked against them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from pipeline.core.errors import BudgetSpent
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
    session.execute(insert(_CALLS), list(rows))
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
    prices (a batch call's; a synchronous call's own cost when not given)."""
    return {
        "run_id": run_id,
        "document_id": document_id,
        "chunk_idx": chunk_idx,
        "stage": r.stage,
        "model": r.model,
        "status": r.status,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "latency_ms": r.latency_ms,
        "error": r.error,
        "key_slot": r.key_slot,
        "limiter_wait_ms": r.limiter_wait_ms,
        "cost_usd": r.cost_usd,
        "mode": r.mode,
        "sync_cost_usd": r.cost_usd if sync_cost_usd is None else sync_cost_usd,
    }


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
