"""Attempts capped across deliveries, answers reused across runs, the watchdog."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import Engine, func, select

from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.runs import watchdog
from pipeline.runtime.embedded import Child
from pipeline.storage import clock, document_leases
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Chunk, Document, LLMCall, Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import claimed_redis_db, eventually, run_cli


def test_attempts_are_capped_across_deliveries_and_hand_backs_do_not_count(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    write_filings(tmp_path, 1, seed=61, sizes=[21_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    (doc_id,) = prepare_run(engine, get_settings(), [str(tmp_path)]).document_ids
    # Three deliveries whose worker died (each lease ran out at once): only the count is left.
    for owner in ("a", "b", "c"):
        with session_scope(engine) as session:
            assert document_leases.start_document(session, doc_id, 3, owner, lease_s=0) is not None
    with session_scope(engine) as session:  # a retried transient error: not an attempt
        fence = session.get(Document, doc_id).fence  # type: ignore[union-attr]
        document_leases.release_for_retry(session, doc_id, fence, grace_s=60)
        document_leases.note_attempt_error(session, doc_id, "UpstreamUnavailable: 503", "c")
    with session_scope(engine) as session:
        assert document_leases.start_document(session, doc_id, 3, "d", lease_s=0) is not None
    with session_scope(engine) as session:
        assert document_leases.start_document(session, doc_id, 3, "e", lease_s=0) is None
        doc = session.get(Document, doc_id)
        assert doc is not None
        assert doc.status == "failed"
        assert doc.error == "gave up after 3 attempts; last: UpstreamUnavailable: 503"


def test_an_unchanged_filing_reuses_its_answers_unless_the_run_is_fresh(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path: Path
) -> None:
    write_filings(tmp_path, 2, seed=63, sizes=[30_000, 45_000])
    runs = []
    for extra in ([], [], ["--fresh"]):
        result = run_cli("submit", str(tmp_path), "--wait", *extra, env=pipeline_env)
        assert result.returncode == 0, result.stderr
        runs.append(result.stdout.strip().splitlines()[-1])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:

        def extract_calls(run_id: str) -> int:
            stmt = select(func.count()).where(LLMCall.run_id == run_id, LLMCall.stage == "extract")
            return int(session.scalar(stmt) or 0)

        def reused(run_id: str) -> int:
            stmt = (
                select(func.count())
                .select_from(Chunk)
                .join(Document, Document.id == Chunk.document_id)
                .where(Document.run_id == run_id, Chunk.reused_from.is_not(None))
            )
            return int(session.scalar(stmt) or 0)

        chunks = session.scalar(
            select(func.count())
            .select_from(Chunk)
            .join(Document, Document.id == Chunk.document_id)
            .where(Document.run_id == runs[0])
        )
        first, again, fresh = runs
        assert extract_calls(first) >= chunks and reused(first) == 0
        assert extract_calls(again) == 0 and reused(again) == chunks
        assert extract_calls(fresh) >= chunks and reused(fresh) == 0
        statuses = set(session.scalars(select(Document.status).where(Document.run_id.in_(runs))))
        assert statuses == {"extracted"}


def test_the_watchdog_resumes_an_idle_run_then_marks_it_stalled(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    write_filings(tmp_path, 2, seed=65, sizes=[21_000] * 2)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])  # stored, never enqueued
    settings = get_settings().model_copy(update={"watchdog_idle_s": 600, "watchdog_max_resumes": 2})

    def verdicts(after_s: float) -> list[watchdog.Verdict]:
        with clock.moved(after_s):  # the watchdog's clock, set through its seam
            return watchdog.check(engine, settings, [plan.run_id])

    assert verdicts(0) == []  # not idle long enough yet
    assert verdicts(590) == []
    (first,) = verdicts(610)
    assert first.action == "resume" and first.plan is not None
    assert sorted(first.plan.document_ids) == sorted(plan.document_ids)
    assert verdicts(620) == []  # resumed just now: it gets time
    assert [v.action for v in verdicts(1220)] == ["resume"]
    assert [v.action for v in verdicts(1830)] == ["stalled"]
    with session_scope(engine) as session:
        run = session.get(Run, plan.run_id)
        assert run is not None and run.status == "stalled" and run.resumes == 2
        assert run.error is not None and "no activity" in run.error
    assert verdicts(2500) == []  # a stalled run waits for an operator


def test_a_run_whose_calls_the_limiter_defers_for_an_hour_is_not_idle(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 28, defect 3: a provider's long pause (a daily quota) defers every call, records
    none, and the watchdog resumed, then stalled, a healthy run. A deferred document's lease
    waits for its retry, and the watchdog counts it as activity until it runs out."""
    write_filings(tmp_path, 1, seed=68, sizes=[21_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    (doc_id,) = plan.document_ids
    with session_scope(engine) as session:
        assert document_leases.start_document(session, doc_id, 5, "host:1:w", lease_s=30) is not None
        document_leases.release_lease(session, doc_id, 1, grace_s=30)  # deferred: its retry is queued ...
        document_leases.expect_retry(
            session, doc_id, grace_s=90 * 60
        )  # ... with a countdown to the quota's reset
    settings = get_settings().model_copy(update={"watchdog_idle_s": 1800})
    with clock.moved(60 * 60):  # an hour of the pause: no call, no write
        assert watchdog.check(engine, settings, [plan.run_id]) == []
    with clock.moved(90 * 60 + 1800 + 1):  # its retry never came, and nothing happened for 30 min
        assert [v.action for v in watchdog.check(engine, settings, [plan.run_id])] == ["resume"]


def test_the_watchdog_stalls_an_idle_run_at_once_when_no_worker_is_alive(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    write_filings(tmp_path, 1, seed=66, sizes=[21_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    settings = get_settings().model_copy(update={"watchdog_idle_s": 600})
    assert watchdog.check(engine, settings, [plan.run_id], workers_alive=0) == []
    with clock.moved(601):
        (verdict,) = watchdog.check(engine, settings, [plan.run_id], workers_alive=0)
    assert verdict.action == "stalled"
    with session_scope(engine) as session:
        run = session.get(Run, plan.run_id)
        assert run is not None and run.status == "stalled" and run.resumes == 0
        assert run.error is not None and "no worker is alive" in run.error


def test_pipeline_watchdog_finishes_a_run_whose_queue_was_lost(
    pipeline_env: dict[str, str], workers: list[Child], redis_base: str, tmp_path: Path
) -> None:
    write_filings(tmp_path, 3, seed=67, sizes=[25_000] * 3)
    with claimed_redis_db(redis_base) as lost:  # a broker that loses what it was sent
        submitted = run_cli("submit", str(tmp_path), env={**pipeline_env, "PIPELINE_REDIS_URL": lost})
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip().splitlines()[-1]
    time.sleep(1.0)
    env = {**pipeline_env, "PIPELINE_WATCHDOG_IDLE_S": "0.5"}
    checked = run_cli("watchdog", env=env)
    assert checked.returncode == 0, checked.stderr
    assert f"run {run_id}: idle" in checked.stderr and "resume" in checked.stderr
    waited = run_cli("status", run_id, env=env)
    assert waited.returncode == 0
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    run = eventually("the resumed run ended", lambda: _ended(engine, run_id), 120)
    assert run.status == "completed"


def _ended(engine: Engine, run_id: str) -> Run | None:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        session.expunge(run)
        return run if run.status in ("completed", "failed") else None
