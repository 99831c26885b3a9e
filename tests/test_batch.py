"""Batch mode against the simulator's Batch API, through real workers: a whole run at half
price, a deadline shorter than the batch, an expired batch, error-file lines."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, select

from pipeline.core.cost import parse_prices
from pipeline.runtime.embedded import Child
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Chunk, Document, LLMBatch, LLMCall, Report, Run
from pipeline_dev.bench.procs import sim_configure
from pipeline_dev.synth_filings import write_filings
from tests.conftest import PRICES, eventually, run_cli

SIM_DEFAULTS = {
    "batch_duration_s": 2.0,
    "batch_validate_s": 0.2,
    "batch_fail_rate": 0.0,
    "batch_expire_after_s": 86_400.0,
    "flex_unavailable_rate": 0.0,
}


@pytest.fixture
def batch_env(pipeline_env: dict[str, str], workers: list[Child], sim_url: str) -> Iterator[dict[str, str]]:
    """The session's workers (they poll batches every 0.3 s); the simulator's batch knobs set
    back after the test."""
    yield pipeline_env
    sim_configure(sim_url, **SIM_DEFAULTS)


def _submit(env: dict[str, str], files: Path, *extra: str) -> str:
    result = run_cli("submit", str(files), "--wait", "--fresh", "--mode", "batch", *extra, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1]


def _calls(env: dict[str, str], run_id: str) -> list[LLMCall]:
    with session_scope(get_engine(env["PIPELINE_DATABASE_URL"])) as session:
        calls = list(session.scalars(select(LLMCall).where(LLMCall.run_id == run_id)))
        session.expunge_all()
    return calls


def _answered_once(env: dict[str, str], run_id: str) -> tuple[int, Counter[str]]:
    """(chunks of the run, answered extract calls by mode); asserts no chunk was answered twice."""
    with session_scope(get_engine(env["PIPELINE_DATABASE_URL"])) as session:
        chunks = session.scalars(
            select(Chunk).join(Document, Document.id == Chunk.document_id).where(Document.run_id == run_id)
        ).all()
        assert all(chunk.result is not None for chunk in chunks)
        count = len(chunks)
    answered = [c for c in _calls(env, run_id) if c.stage == "extract" and c.status == "ok"]
    per_chunk = Counter((c.document_id, c.chunk_idx) for c in answered)
    assert max(per_chunk.values()) == 1, [k for k, n in per_chunk.items() if n > 1]
    assert len(per_chunk) == count
    return count, Counter(c.mode for c in answered)


def _run(env: dict[str, str], run_id: str) -> Run:
    with session_scope(get_engine(env["PIPELINE_DATABASE_URL"])) as session:
        run = session.get(Run, run_id)
        assert run is not None
        session.expunge(run)
        assert session.scalar(select(Report.id).where(Report.run_id == run_id)) is not None
        statuses = Counter(session.scalars(select(Document.status).where(Document.run_id == run_id)))
    assert statuses == {"extracted": statuses.total()}, statuses
    return run


def test_a_run_in_batch_mode_is_extracted_and_reported_at_half_price(
    batch_env: dict[str, str], sim_url: str, tmp_path: Path
) -> None:
    sim_configure(sim_url, batch_duration_s=1.0)
    write_filings(tmp_path, 4, seed=141, sizes=[30_000] * 4)
    run_id = _submit(batch_env, tmp_path)
    run = _run(batch_env, run_id)
    assert run.mode == "batch" and run.mode_reason == "asked for: --mode batch"
    assert run.dispatched_at is not None and run.cutover_at is None
    chunks, modes = _answered_once(batch_env, run_id)
    assert modes == {"batch": chunks}
    price = parse_prices(PRICES)["sim-1"]
    batch_calls = [c for c in _calls(batch_env, run_id) if c.mode == "batch"]
    for call in batch_calls:
        full = price.of(call.prompt_tokens, call.completion_tokens, call.cached_tokens)
        assert call.sync_cost_usd == pytest.approx(full) and call.cost_usd == pytest.approx(full / 2)
    with session_scope(get_engine(batch_env["PIPELINE_DATABASE_URL"])) as session:
        rows = session.scalars(select(LLMBatch).where(LLMBatch.run_id == run_id)).all()
        assert [(r.status, r.requests, r.completed, r.failed) for r in rows] == [
            ("ingested", chunks, chunks, 0)
        ]
        assert rows[0].provider_batch_id and rows[0].input_file_id and rows[0].output_file_id
    for file_id in (rows[0].input_file_id, rows[0].output_file_id):  # ingested: deleted at the provider
        gone = httpx.get(
            f"{sim_url}/files/{file_id}",
            headers={"Authorization": f"Bearer {batch_env['PIPELINE_LLM_API_KEY']}"},
            timeout=10,
        )
        assert gone.status_code == 404, (file_id, gone.status_code)
    status = run_cli("status", run_id, env=batch_env)
    assert status.returncode == 0, status.stderr
    assert "batch" in status.stdout and "saved" in status.stdout
    report = run_cli("report", run_id, env=batch_env)
    assert re.search(
        rf"batch and flex: {chunks} answers at batch prices .* saved against sync prices", report.stdout
    )
    listed = run_cli("runs", "--json", env=batch_env)
    assert {"run_id": run_id, "mode": "batch"}.items() <= next(
        r for r in json.loads(listed.stdout) if r["run_id"] == run_id
    ).items()


def test_a_deadline_shorter_than_the_batch_is_met_with_its_lines_and_the_rest_sync(
    batch_env: dict[str, str], sim_url: str, tmp_path: Path
) -> None:
    sim_configure(sim_url, batch_duration_s=30.0)
    write_filings(tmp_path, 4, seed=142, sizes=[40_000] * 4)
    # 20 s: enough for the batch to answer some lines before the cutover even on a slow
    # machine, where storing, uploading and creating the batch take seconds (12 s left none).
    deadline = datetime.now(UTC) + timedelta(seconds=20)
    run_id = _submit(batch_env, tmp_path, "--deadline", deadline.isoformat())
    finished = datetime.now(UTC)
    run = _run(batch_env, run_id)
    assert run.cutover_at is not None
    # The tolerance: a poll (0.3 s), the cancel, the report's calls, a shared 2-core machine.
    assert finished <= deadline + timedelta(seconds=10), finished - deadline
    chunks, modes = _answered_once(batch_env, run_id)
    assert modes["batch"] > 0 and modes["sync"] > 0 and modes.total() == chunks, modes
    with session_scope(get_engine(batch_env["PIPELINE_DATABASE_URL"])) as session:
        rows = session.scalars(select(LLMBatch).where(LLMBatch.run_id == run_id)).all()
    assert len(rows) == 1, [(r.status, r.requests, r.completed, r.failed, r.error) for r in rows]
    row = rows[0]
    assert row.status == "ingested" and row.cancelled_at is not None
    assert row.completed == modes["batch"], (row.completed, modes)


def test_an_expired_batch_keeps_its_lines_and_pays_for_none_twice(
    batch_env: dict[str, str], sim_url: str, tmp_path: Path
) -> None:
    before = sim_configure(sim_url, batch_duration_s=4.0, batch_expire_after_s=2.0)
    write_filings(tmp_path, 3, seed=143, sizes=[40_000] * 3)
    run_id = _submit(batch_env, tmp_path)
    _run(batch_env, run_id)
    chunks, modes = _answered_once(batch_env, run_id)
    after = sim_configure(sim_url, batch_duration_s=2.0)
    answered = after["batch_lines_answered"] - before["batch_lines_answered"]
    assert modes["batch"] == answered and 0 < answered < chunks, (modes, answered)
    assert after["batches_expired"] - before["batches_expired"] == 2  # the second try expires too
    assert modes["sync"] == chunks - answered


def test_error_file_lines_go_in_the_next_batch(
    batch_env: dict[str, str], sim_url: str, tmp_path: Path
) -> None:
    sim_configure(sim_url, batch_duration_s=0.5, batch_fail_rate=0.5)
    write_filings(tmp_path, 4, seed=144, sizes=[30_000] * 4)
    run_id = _submit(batch_env, tmp_path)
    _run(batch_env, run_id)
    _, modes = _answered_once(batch_env, run_id)
    with session_scope(get_engine(batch_env["PIPELINE_DATABASE_URL"])) as session:
        rows = session.scalars(select(LLMBatch).where(LLMBatch.run_id == run_id).order_by(LLMBatch.id)).all()
        tries = Counter(
            session.scalars(
                select(Chunk.batch_tries)
                .join(Document, Document.id == Chunk.document_id)
                .where(Document.run_id == run_id)
            )
        )
    assert len(rows) == 2 and rows[1].requests == rows[0].failed > 0, [(r.requests, r.failed) for r in rows]
    assert tries[2] == rows[0].failed
    assert modes["batch"] == rows[0].completed + rows[1].completed
    assert modes["sync"] == rows[1].failed


def test_auto_mode_records_why(batch_env: dict[str, str], tmp_path: Path) -> None:
    write_filings(tmp_path, 2, seed=145, sizes=[20_000] * 2)
    soon = (datetime.now(UTC) + timedelta(seconds=30)).isoformat()
    result = run_cli("submit", str(tmp_path), "--fresh", "--mode", "auto", "--deadline", soon, env=batch_env)
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    engine = get_engine(batch_env["PIPELINE_DATABASE_URL"])
    run = eventually("the run completed", lambda: _completed(engine, run_id))
    # The CLI's margin (300 s by default) leaves flex no time either: the standard tier.
    assert run.mode == "sync" and run.mode_reason and "the standard tier" in run.mode_reason, run.mode_reason
    bad = run_cli("submit", str(tmp_path), "--mode", "batch", "--deadline", "tomorrow-ish", env=batch_env)
    assert bad.returncode == 2 and "--deadline" in bad.stderr + bad.stdout


def test_an_auto_run_goes_batch_then_flex_and_records_each_document_s_tier(
    batch_env: dict[str, str], sim_url: str, tmp_path: Path
) -> None:
    """The three-tier planner: a batch slower than the deadline, flex refusing a tenth of its
    calls. The run starts in batches, cuts over in time for flex to answer the rest, meets its
    deadline, and each document says which tier answered it and why."""
    sim_configure(sim_url, batch_duration_s=40.0, flex_unavailable_rate=0.1)
    write_filings(tmp_path, 4, seed=147, sizes=[40_000] * 4)
    env = {**batch_env, "PIPELINE_BATCH_MIN_ROOM_S": "0", "PIPELINE_BATCH_DEADLINE_MARGIN_S": "1"}
    deadline = datetime.now(UTC) + timedelta(seconds=25)
    result = run_cli(
        "submit",
        str(tmp_path),
        "--wait",
        "--fresh",
        "--mode",
        "auto",
        "--deadline",
        deadline.isoformat(),
        env=env,
    )
    finished = datetime.now(UTC)
    assert result.returncode == 0, result.stdout + result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    run = _run(batch_env, run_id)
    assert run.mode == "batch" and run.cutover_at is not None, run.mode_reason
    assert run.extract_tier == "flex" and (run.tier_reason or "").startswith("cutover at"), run.tier_reason
    assert finished <= deadline + timedelta(seconds=10), finished - deadline
    chunks, modes = _answered_once(batch_env, run_id)
    assert modes["batch"] > 0 and modes["flex"] > 0 and modes.total() == chunks, modes
    with session_scope(get_engine(batch_env["PIPELINE_DATABASE_URL"])) as session:
        tiers = session.execute(
            select(Document.tier, Document.tier_reason).where(Document.run_id == run_id)
        ).all()
    assert len(tiers) == 4 and all(tier in ("batch", "flex", "sync") and reason for tier, reason in tiers), (
        tiers
    )
    assert any(tier == "flex" for tier, _ in tiers), tiers
    status = run_cli("status", run_id, "--json", env=batch_env)
    view = json.loads(status.stdout)
    assert sum(sum(r.values()) for r in view["tiers"].values()) == 4, view["tiers"]
    assert view["tier_reason"] == run.tier_reason


def test_a_batch_run_of_unchanged_filings_reuses_their_answers_and_sends_no_batch(
    batch_env: dict[str, str], sim_url: str, tmp_path: Path
) -> None:
    sim_configure(sim_url, batch_duration_s=0.5)
    write_filings(tmp_path, 2, seed=146, sizes=[30_000] * 2)
    _submit(batch_env, tmp_path)
    again = run_cli("submit", str(tmp_path), "--wait", "--mode", "batch", env=batch_env)
    assert again.returncode == 0, again.stdout + again.stderr
    run_id = again.stdout.strip().splitlines()[-1]
    _run(batch_env, run_id)
    with session_scope(get_engine(batch_env["PIPELINE_DATABASE_URL"])) as session:
        assert session.scalar(select(LLMBatch.id).where(LLMBatch.run_id == run_id)) is None
    assert not [c for c in _calls(batch_env, run_id) if c.stage == "extract"]


def test_a_budget_below_one_batch_line_at_its_most_sends_no_batch(
    batch_env: dict[str, str], sim_url: str, tmp_path: Path
) -> None:
    """The budget counts a batch at its submission, at what its file may cost at most: a budget
    below one line's sends no batch; the run goes to the synchronous path, whose budget check
    stops new calls once the budget is spent (the documents left fail with the budget as their
    reason). What was paid is what the calls recorded."""
    sim_configure(sim_url, batch_duration_s=0.5)
    write_filings(tmp_path, 3, seed=146, sizes=[20_000] * 3)
    price = parse_prices(PRICES)["sim-1"]
    budget = price.of(1_000, 0)  # less than one line's half price: a 20 KB chunk is ~2,500 tokens
    env = {**batch_env, "PIPELINE_RUN_BUDGET_USD": f"{budget:.6f}"}
    result = run_cli("submit", str(tmp_path), "--wait", "--fresh", "--mode", "batch", env=env)
    run_id = result.stdout.strip().splitlines()[-1]
    calls = _calls(batch_env, run_id)
    assert not [c for c in calls if c.mode == "batch"], "no batch line"
    with session_scope(get_engine(batch_env["PIPELINE_DATABASE_URL"])) as session:
        assert session.scalar(select(LLMBatch.id).where(LLMBatch.run_id == run_id)) is None, "no batch"
        documents = session.scalars(select(Document).where(Document.run_id == run_id)).all()
        run = session.get(Run, run_id)
        assert run is not None and run.cost_usd == pytest.approx(sum(c.cost_usd or 0.0 for c in calls))
    assert len(documents) == 3
    # Calls already in flight when the budget is reached are paid for, as in a sync run.
    assert all(
        d.status == "extracted" or (d.status == "failed" and (d.error or "").startswith("budget:"))
        for d in documents
    ), [(d.status, d.error) for d in documents]


def _completed(engine: Engine, run_id: str) -> Run | None:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        session.expunge(run)
        return run if run.status == "completed" else None
