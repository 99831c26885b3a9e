"""Batch ingestion against the simulator's Batch API, one tick at a time in this process (issue
28, defect 8): a batch line whose answer needs a synchronous call (a repair, the rest of a
cut-off answer) is paid for once, whatever that call's wait."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, delete, select, update

from pipeline.context import Context
from pipeline.core.cost import price_of
from pipeline.core.settings import get_settings
from pipeline.extraction.prompting import prompt_version
from pipeline.ingest.producer import prepare_run
from pipeline.llm.batch import BatchAPI
from pipeline.llm.client import LLMClient
from pipeline.runs import batch_submit, batching
from pipeline.storage import batches, run_state
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Chunk, Document, LLMBatch, LLMCall, Run
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.synth_filings import write_filings
from tests.conftest import eventually

IDLE_IN_TRANSACTION_TIMEOUT_MS = 2_000
"""Short enough for a test, long enough that a transaction's own statements on a loaded 2-CPU
machine do not idle past it (at 1 s, one full suite beside a local model server saw the store's
insert cut, the call being made outside the transaction: most likely the CPU was slow)."""
SYNC_CALL_S = 2.5
"""Each synchronous call's latency at the simulator: longer than the session's idle timeout."""


@pytest.fixture
def impatient_engine(pipeline_env: dict[str, str]) -> Iterator[Engine]:
    """The session's database, its sessions ended by the server after 2 s idle in a transaction
    (production's 30 s, scaled down to the simulator's call)."""
    url = pipeline_env["PIPELINE_DATABASE_URL"]
    if not url.startswith("postgresql"):
        pytest.skip("idle_in_transaction_session_timeout is Postgres's (Postgres under CI)")
    options = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}"
    engine = create_engine(url, connect_args={"options": options})
    yield engine
    engine.dispose()


def _batch_run(engine: Engine, files: Path) -> str:
    plan = prepare_run(engine, get_settings(), [str(files)])
    with session_scope(engine) as session:
        run_state.set_mode(session, plan.run_id, "batch", "test: batch ingestion", None)
    return plan.run_id


def _row(engine: Engine, run_id: str) -> LLMBatch:
    with session_scope(engine) as session:
        row = session.scalars(select(LLMBatch).where(LLMBatch.run_id == run_id)).one()
        session.expunge(row)
    return row


def _wait_until_ended(ctx: Context, run_id: str) -> None:
    """Until the provider ended the run's batch (its lines are all answered)."""
    batch_id = _row(ctx.engine, run_id).provider_batch_id
    assert batch_id, "the first tick created the batch"
    api = BatchAPI(ctx.settings.llm_base_url or "", ctx.settings.api_key_value(), 10.0)
    try:
        eventually("the simulator's batch ended", lambda: api.retrieve(batch_id).ended, 20)
    finally:
        api.close()


def test_a_batch_repair_longer_than_the_idle_in_transaction_timeout_is_stored_and_paid_once(
    impatient_engine: Engine, tmp_path: Path
) -> None:
    """The synchronous call a cut-off batch answer needs takes longer than the database keeps a
    session idle in a transaction: it is made outside any, so the answer and the line's progress
    are stored after it, and the next poll pays for nothing again."""
    write_filings(tmp_path, 1, seed=281, sizes=[8_000])
    (path,) = tmp_path.iterdir()
    path.write_text(path.read_text() + "\n[[sim:cutoff]]\n")  # the batch answer is cut off
    run_id = _batch_run(impatient_engine, tmp_path)
    config = SimConfig(p50_s=SYNC_CALL_S, p95_s=0, seed=8, batch_duration_s=0.1, batch_validate_s=0.05)
    with SimServer(config) as sim:
        settings = get_settings().model_copy(update={"llm_base_url": sim.base_url})
        ctx = Context(settings, impatient_engine, LLMClient(settings, pool_size=1))
        try:
            assert batching.tick(ctx, run_id).submitted == 1
            _wait_until_ended(ctx, run_id)
            batching.tick(ctx, run_id)  # ingests the line: its synchronous call is made
            paid = sim.stats()["requests_total"]
            row = _row(impatient_engine, run_id)
            batching.tick(ctx, run_id)  # the next poll
            assert sim.stats()["requests_total"] == paid, "the next poll paid for the line again"
        finally:
            ctx.llm.close()
    assert paid >= 1, "the cut-off answer needed a synchronous call"
    assert (row.status, row.output_lines_done, row.failures, row.error) == ("ingested", 1, 0, None)
    with session_scope(impatient_engine) as session:
        answered = session.scalars(
            select(Chunk.result)
            .join(Document, Document.id == Chunk.document_id)
            .where(Document.run_id == run_id)
        ).all()
        modes = session.scalars(select(LLMCall.mode).where(LLMCall.run_id == run_id)).all()
        session.execute(delete(Run).where(Run.id == run_id))
    assert answered and all(result is not None for result in answered)
    assert sorted(modes) == sorted(["batch"] + ["sync"] * paid), "every call recorded once"


def test_a_batch_is_sent_only_when_what_it_may_cost_fits_the_budget_beside_the_open_ones(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    """Budget counted at submission (estimated) and at ingestion (actual): with a budget for one
    line at its most, the first file carries one line, the rest waits while it is open, and once
    its actual cost is recorded and the rest still does not fit, the batch path hands the run
    to the synchronous path (whose budget check fails what it cannot pay for)."""
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    write_filings(tmp_path, 3, seed=283, sizes=[8_000] * 3)
    run_id = _batch_run(engine, tmp_path)
    config = SimConfig(p50_s=0, p95_s=0, seed=9, batch_duration_s=0.1, batch_validate_s=0.05)
    with SimServer(config) as sim:
        settings = get_settings().model_copy(
            update={"llm_base_url": sim.base_url, "llm_model": "sim-1", "llm_prices": "sim-1:1.0/2.0"}
        )
        ctx = Context(settings, engine, LLMClient(settings, pool_size=1))
        # A line at its most, as the submit counts it: its prompt and max_tokens at batch prices.
        price = price_of(settings.batch_prices(), "sim-1")
        assert price is not None
        with session_scope(engine) as session:
            run = session.get(Run, run_id)
            assert run is not None
            version = prompt_version(None, run.prompt_version)
            pending = batches.pending_chunks(session, run_id, version, settings.batch_line_attempts)
            requests = list(batch_submit._requests(ctx, run, pending, version))
            assert len(requests) == 3
            most = settings.extract_max_tokens
            line = max(price.of(r.tokens - most, most) for r in requests)
            session.execute(update(Run).where(Run.id == run_id).values(budget_usd=1.4 * line))
        try:
            first = batching.tick(ctx, run_id)
            assert (first.submitted, first.dispatch) == (1, False), "one line fits, beside none open"
            row = _row(engine, run_id)
            assert row.requests == 1 and row.estimated_cost_usd is not None
            assert row.estimated_cost_usd <= 1.4 * line
            assert batching.tick(ctx, run_id).submitted == 0, "the open batch holds the room"
            _wait_until_ended(ctx, run_id)
            last = batching.tick(ctx, run_id)  # ingested: its actual cost is recorded
        finally:
            ctx.llm.close()
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        spent, budget = run.cost_usd, run.budget_usd
        rows = session.scalars(select(LLMBatch).where(LLMBatch.run_id == run_id)).all()
        session.execute(delete(Run).where(Run.id == run_id))
    assert len(rows) == 1 and rows[0].status == "ingested"
    assert 0 < spent < rows[0].estimated_cost_usd, "the actual cost, below the estimate at its most"
    assert budget is not None and budget - spent < line, "no room left for another line"
    assert last.dispatch and last.submitted == 0, "the rest goes to the synchronous path"
