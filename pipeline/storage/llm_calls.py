"""Every LLM call's record (tokens, latency, cost), and the run's budget checked against them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from pipeline.core.errors import BudgetSpent
from pipeline.storage.models import (
    LLMCall,
    Run,
)

if TYPE_CHECKING:
    from pipeline.llm.client import CallRecord


def record_calls(
    session: Session,
    run_id: str,
    document_id: int | None,
    chunk_idx: int | None,
    records: Iterable[CallRecord],
) -> None:
    session.add_all(call_row(run_id, document_id, chunk_idx, r) for r in records)
    spent = sum(r.cost_usd or 0.0 for r in records)
    if spent:
        session.execute(update(Run).where(Run.id == run_id).values(cost_usd=Run.cost_usd + spent))


def call_row(
    run_id: str,
    document_id: int | None,
    chunk_idx: int | None,
    r: CallRecord,
    sync_cost_usd: float | None = None,
) -> LLMCall:
    """A call's row; `sync_cost_usd` is what its tokens cost at synchronous prices (a batch
    call's; a synchronous call's own cost when not given)."""
    return LLMCall(
        run_id=run_id,
        document_id=document_id,
        chunk_idx=chunk_idx,
        stage=r.stage,
        model=r.model,
        status=r.status,
        prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens,
        latency_ms=r.latency_ms,
        error=r.error,
        key_slot=r.key_slot,
        limiter_wait_ms=r.limiter_wait_ms,
        cost_usd=r.cost_usd,
        mode=r.mode,
        sync_cost_usd=r.cost_usd if sync_cost_usd is None else sync_cost_usd,
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
