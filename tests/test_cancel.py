"""`pipeline cancel`: a run in flight spends nothing more. No call goes out for it once the
command returns (none received by the provider, none recorded that the provider had not received
before), its unfinished documents end `cancelled` with the reason, its provider batches are
cancelled, the report of what was done is written, and a second cancel changes nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import redis
from sqlalchemy import Engine, select

from pipeline.core.errors import RunCancelled
from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.llm.batch import BatchAPI
from pipeline.llm.stops import StopFlags, before_call, checked_by, flag_key
from pipeline.reporting.synthesize import report_cancelled
from pipeline.runs.batching import cancel_open_batches
from pipeline.runs.cancel import cancel_run
from pipeline.storage import run_state
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, LLMBatch, RunStatus
from pipeline_dev.synth_filings import write_filings
from tests.conftest import eventually, run_cli
from tests.repair_stack import (
    Stack,
    answered_chunks,
    calls_of,
    repair_stack,
    reports_of,
    run_row,
    statuses,
)


@pytest.fixture(scope="module")
def stack(
    pipeline_env: dict[str, str], redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A slow provider (about two seconds a call): a run of a few documents is still going
    seconds after it started."""
    logs = tmp_path_factory.mktemp("cancel")
    with repair_stack(pipeline_env, redis_base, logs, "--p50", "2.0", "--p95", "2.4") as found:
        yield found


def test_a_cancelled_run_sends_no_call_more_and_reports_what_it_did(stack: Stack, tmp_path: Path) -> None:
    write_filings(tmp_path, 8, seed=291, sizes=[40_000] * 8)  # 3 chunks each, and a summary
    before = stack.stats()["requests_total"]
    run_id = stack.submit(tmp_path)
    eventually("the run's first answers", lambda: answered_chunks(stack.engine, run_id) >= 2)

    cancelled = run_cli("cancel", run_id, "--reason", "submitted by mistake", env=stack.env)
    received = stack.stats()["requests_total"] - before  # every call the run made until now

    assert cancelled.returncode == 0, cancelled.stderr
    assert f"run {run_id} cancelled:" in cancelled.stderr and "no new LLM call" in cancelled.stderr
    eventually("the worker to be idle, with nothing queued", stack.idle)
    assert stack.stats()["requests_total"] - before == received, "the provider got calls after the cancel"
    calls = calls_of(stack.engine, run_id)
    assert len(calls) == received, "every call recorded was one the provider had before the cancel"
    counts = statuses(stack.engine, run_id)
    assert counts.get("cancelled", 0) > 0 and set(counts) <= {"extracted", "cancelled"}, counts
    assert received < 8 * (3 + 1), "the run had calls left to make when it was cancelled"
    with session_scope(stack.engine) as session:
        errors = set(
            session.scalars(
                select(Document.error).where(Document.run_id == run_id, Document.status == "cancelled")
            )
        )
    assert len(errors) == 1, errors
    (error,) = errors
    assert error and "submitted by mistake" in error and error.endswith("before it was extracted")
    run = run_row(stack.engine, run_id)
    assert run.status == "cancelled" and run.error and "submitted by mistake" in run.error
    (report,) = reports_of(stack.engine, run_id)
    assert report.json["cancelled"] == run.error
    assert "## Not extracted" in report.markdown and "cancelled" in report.markdown

    again = run_cli("cancel", run_id, env=stack.env)
    assert again.returncode == 0, again.stderr
    assert f"run {run_id} was already cancelled" in again.stderr
    assert run_row(stack.engine, run_id).status == "cancelled"
    assert len(reports_of(stack.engine, run_id)) == 1
    assert stack.stats()["requests_total"] - before == received


def test_cancelling_a_batch_run_cancels_its_batch_at_the_provider(stack: Stack, tmp_path: Path) -> None:
    stack.configure(batch_duration_s=20.0, batch_validate_s=0.2)
    try:
        write_filings(tmp_path, 3, seed=293, sizes=[30_000] * 3)
        before = stack.stats()["requests_total"]
        run_id = stack.submit(tmp_path, "--mode", "batch")
        batch_id = eventually("the batch in progress", lambda: _provider_batch(stack, run_id, "in_progress"))
        eventually("a line done", lambda: _at_provider(stack, batch_id)["request_counts"]["completed"] >= 1)

        cancelled = run_cli("cancel", run_id, env=stack.env)

        assert cancelled.returncode == 0, cancelled.stderr
        # The command cancels the batch, unless the run's poll (every 0.3 s here), which found
        # the run cancelled a moment before, did it first: either way it is cancelling now.
        assert _at_provider(stack, batch_id)["status"] in ("cancelling", "cancelled"), cancelled.stderr
        # The provider ends a cancel in its own time (the simulator: within its batch window).
        eventually("its completed lines ingested", lambda: _row_status(stack, run_id) == "ingested", 90)
        batch = _at_provider(stack, batch_id)
        assert batch["status"] == "cancelled"
        done = batch["request_counts"]["completed"]
        assert 1 <= done < batch["request_counts"]["total"], batch["request_counts"]
        modes = Counter((c.mode, c.status) for c in calls_of(stack.engine, run_id))
        assert modes == {("batch", "ok"): done}, "what the batch answered is kept; nothing else was asked"
        assert answered_chunks(stack.engine, run_id) == done
        assert stack.stats()["requests_total"] == before, "no synchronous call was made for the run"
        assert set(statuses(stack.engine, run_id)) == {"cancelled"}
        assert run_row(stack.engine, run_id).status == "cancelled"
        assert len(reports_of(stack.engine, run_id)) == 1
    finally:
        stack.configure(batch_duration_s=2.0)


def _provider_batch(stack: Stack, run_id: str, status: str) -> str | None:
    with session_scope(stack.engine) as session:
        row = session.scalar(select(LLMBatch).where(LLMBatch.run_id == run_id))
        return row.provider_batch_id if row is not None and row.status == status else None


def _row_status(stack: Stack, run_id: str) -> str | None:
    with session_scope(stack.engine) as session:
        return session.scalar(select(LLMBatch.status).where(LLMBatch.run_id == run_id))


def _at_provider(stack: Stack, batch_id: str) -> dict[str, object]:
    answer = httpx.get(
        f"{stack.sim}/batches/{batch_id}",
        headers={"Authorization": f"Bearer {stack.env['PIPELINE_LLM_API_KEY']}"},
        timeout=10,
    )
    answer.raise_for_status()
    found: dict[str, object] = answer.json()
    return found


def test_a_batch_the_runs_poll_cancelled_first_counts_as_cancelled(stack: Stack, tmp_path: Path) -> None:
    """The run's poll and `pipeline cancel` both cancel its batches: whichever comes second is
    refused by the provider (409) and reads the batch's state instead of failing."""
    engine = stack.engine
    write_filings(tmp_path, 1, seed=299, sizes=[21_000])
    run_id = prepare_run(engine, get_settings(), [str(tmp_path)]).run_id
    sdk = openai.OpenAI(base_url=stack.sim, api_key=stack.env["PIPELINE_LLM_API_KEY"], max_retries=0)
    line = (
        b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "sim-1"}}\n'
    )
    uploaded = sdk.files.create(file=("x.jsonl", line), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    sdk.batches.cancel(batch.id)  # the poll's cancel
    eventually("the batch cancelled", lambda: sdk.batches.retrieve(batch.id).status == "cancelled")
    with session_scope(engine) as session:
        session.add(LLMBatch(run_id=run_id, provider_batch_id=batch.id, status="in_progress", requests=1))
    api = BatchAPI(stack.sim, stack.env["PIPELINE_LLM_API_KEY"], 10.0)
    try:
        done = cancel_open_batches(engine, api, run_id, "run cancelled")
    finally:
        api.close()
    assert (done.cancelled, done.failed) == ([batch.id], [])
    assert _row_status(stack, run_id) in ("cancelling", "cancelled")


def test_cancel_of_an_unknown_run_fails_clearly(pipeline_env: dict[str, str]) -> None:
    result = run_cli("cancel", "no-such-run", env=pipeline_env)
    assert result.returncode == 2
    assert "no run matches 'no-such-run'" in result.stderr


# -- the parts, on the database and Redis -------------------------------------------------------


def test_cancel_marks_the_run_and_its_unfinished_documents_and_flags_it_for_the_workers(
    pipeline_env: dict[str, str], client: redis.Redis, tmp_path: Path
) -> None:
    engine = _engine(pipeline_env)
    write_filings(tmp_path, 2, seed=295, sizes=[21_000] * 2)
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    with session_scope(engine) as session:
        run_state.mark_stored(session, plan.run_id)
        run_state.move_run(session, plan.run_id, "start")
    flags = StopFlags(client)

    outcome = cancel_run(engine, get_settings(), plan.run_id, "a test", flags)

    assert (outcome.documents, outcome.already, outcome.ended) == (2, False, False)
    assert statuses(engine, plan.run_id) == {"cancelled": 2}
    assert client.get(flag_key(plan.run_id)) == b"cancelled by a test before it was extracted"
    with pytest.raises(RunCancelled, match="cancelled by a test"), checked_by(flags.check_of(plan.run_id)):
        before_call()
    report_cancelled(engine, plan.run_id)
    assert run_row(engine, plan.run_id).status == RunStatus.CANCELLED, "its report leaves it cancelled"
    again = cancel_run(engine, get_settings(), plan.run_id, "a second test", flags)
    assert (again.documents, again.already) == (0, True)
    assert again.reason == "cancelled by a test; 0 of 2 documents were extracted"
    client.delete(flag_key(plan.run_id))


def test_cancel_of_an_ended_run_changes_nothing(pipeline_env: dict[str, str], tmp_path: Path) -> None:
    engine = _engine(pipeline_env)
    write_filings(tmp_path, 1, seed=297, sizes=[21_000])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    with session_scope(engine) as session:
        run_state.move_run(session, plan.run_id, "report", RunStatus.COMPLETED)
    outcome = cancel_run(engine, get_settings(), plan.run_id, "a test", None)
    assert outcome.ended and outcome.status == RunStatus.COMPLETED and outcome.documents == 0
    assert statuses(engine, plan.run_id) == {"pending": 1}


def _engine(env: dict[str, str]) -> Engine:
    return get_engine(env["PIPELINE_DATABASE_URL"])
