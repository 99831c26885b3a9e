"""`pipeline retry`: a run whose documents failed (the provider refused its key) is retried in
the same run once the key works again: every document ends extracted, the run has one report,
the new one, no chunk answered before is asked again, and each earlier round is kept."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text, update

from pipeline.core import errors
from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.runs.retry import RetryRefused, start_retry
from pipeline.storage import run_state
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Chunk, Document, DocumentAttempt, Report, RunStatus
from pipeline_dev.synth_filings import write_filings
from tests.conftest import eventually, run_cli
from tests.repair_stack import (
    Stack,
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
    """One thread: a document's chunks are asked one after another, so a key revoked after its
    first answer fails it with that answer kept. Each answer takes 0.8 s or more: the key is
    revoked within that of the first answer (at 0.4 s, a loaded machine once let the document's
    next two chunks be answered first, and none failed with an answer kept)."""
    logs = tmp_path_factory.mktemp("retry")
    with repair_stack(pipeline_env, redis_base, logs, "--p50", "0.8", "--p95", "1.0", concurrency=1) as found:
        yield found


def test_a_run_whose_documents_were_refused_is_retried_to_the_end_reusing_its_answers(
    stack: Stack, tmp_path: Path
) -> None:
    key = stack.env["PIPELINE_LLM_API_KEY"]
    write_filings(tmp_path, 3, seed=301, sizes=[40_000] * 3)  # 3 chunks each
    run_id = stack.submit(tmp_path)
    eventually("a document with its first chunk answered", lambda: _halfway(stack.engine, run_id))
    stack.configure(api_key="sk-revoked-at-the-provider")  # every call from now on: 401
    eventually("the run's first report", lambda: reports_of(stack.engine, run_id))
    first = run_row(stack.engine, run_id)
    failed = _ids(stack.engine, run_id, "failed")
    answered = _answered(stack.engine, run_id)
    assert first.status == "failed" and failed, statuses(stack.engine, run_id)
    assert any(doc in failed for doc, _ in answered), "a failed document kept answers to reuse"
    assert _dead_letters(stack.engine, run_id) == {"provider refused": len(failed)}
    (old_report,) = reports_of(stack.engine, run_id)

    stack.configure(api_key=key)  # the key works again
    retried = run_cli("retry", run_id, "--failed", "--wait", env=stack.env)

    assert retried.returncode == 0, retried.stderr
    assert f"retrying {len(failed)} documents of run {run_id} (failed until now)" in retried.stderr
    assert statuses(stack.engine, run_id) == {"extracted": 3}
    assert run_row(stack.engine, run_id).status == "completed"
    (report,) = reports_of(stack.engine, run_id)
    assert report.created_at > old_report.created_at and report.json["totals"]["documents"] == {
        "extracted": 3
    }
    asked = Counter(
        (c.document_id, c.chunk_idx)
        for c in calls_of(stack.engine, run_id)
        if c.stage == "extract" and c.status == "ok"
    )
    assert set(asked) == _answered(stack.engine, run_id) and max(asked.values()) == 1, (
        "no chunk was asked twice"
    )
    rounds = _rounds(stack.engine, run_id)
    assert sorted(r.document_id for r in rounds) == sorted(failed)
    assert {(r.round, r.status) for r in rounds} == {(1, "failed")}
    assert all(r.error and "refused the API key" in r.error for r in rounds)
    assert _dead_letters(stack.engine, run_id) == {}

    again = run_cli("retry", run_id, "--failed", env=stack.env)
    assert again.returncode == 0, again.stderr
    assert "nothing to retry" in again.stderr


def test_a_batch_run_refused_by_the_provider_is_retried_to_the_end(stack: Stack, tmp_path: Path) -> None:
    """A batch run: the provider refuses the key when the batch is sent, so the run ends failed
    with its report; once the key works, `retry --failed` ends it completed with one report,
    every document extracted."""
    key = stack.env["PIPELINE_LLM_API_KEY"]
    write_filings(tmp_path, 2, seed=305, sizes=[21_000] * 2)
    stack.configure(api_key="sk-revoked-at-the-provider")
    try:
        run_id = stack.submit(tmp_path, "--mode", "batch")
        eventually("the batch run's first report", lambda: reports_of(stack.engine, run_id))
    finally:
        stack.configure(api_key=key)
    first = run_row(stack.engine, run_id)
    assert first.status == "failed", statuses(stack.engine, run_id)
    failed = _ids(stack.engine, run_id, "failed")
    assert len(failed) == 2, statuses(stack.engine, run_id)

    retried = run_cli("retry", run_id, "--failed", "--wait", env=stack.env)

    assert retried.returncode == 0, retried.stderr
    assert statuses(stack.engine, run_id) == {"extracted": 2}
    assert run_row(stack.engine, run_id).status == "completed"
    (report,) = reports_of(stack.engine, run_id)
    assert report.json["totals"]["documents"] == {"extracted": 2}
    # A refused batch hands the run to the synchronous path (its calls refused in turn), so the
    # retry sends the documents to the workers; the calls refused before stay recorded.
    assert "sent to the workers: 0 of 4 chunks answered before are reused, 4 asked" in retried.stderr
    calls = Counter((c.stage, c.status) for c in calls_of(stack.engine, run_id))
    assert calls[("extract", "ok")] == 4 and calls[("extract", "rejected")] >= 1, calls


def test_retry_of_an_unknown_run_fails_clearly(pipeline_env: dict[str, str]) -> None:
    result = run_cli("retry", "no-such-run", env=pipeline_env)
    assert result.returncode == 2
    assert "no run matches 'no-such-run'" in result.stderr


# -- the parts, on the database -----------------------------------------------------------------


@pytest.fixture
def ended_run(pipeline_env: dict[str, str], tmp_path: Path) -> tuple[Engine, str, list[int]]:
    """A stored run that ended failed with its report: one document of each final status."""
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    write_filings(tmp_path, 4, seed=303, sizes=[21_000] * 4)
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    ids = sorted(plan.document_ids)
    with session_scope(engine) as session:
        run_state.mark_stored(session, plan.run_id)
        for doc_id, status in zip(ids, ("failed", "cancelled", "extracted", "skipped"), strict=True):
            session.execute(
                update(Document)
                .where(Document.id == doc_id)
                .values(status=status, error=f"was {status}", attempts=5)
            )
        session.add(Report(run_id=plan.run_id, markdown="# old", json={}))
        run_state.move_run(session, plan.run_id, "report", RunStatus.FAILED, "3 of 4 failed")
    return engine, plan.run_id, ids


def test_retry_sends_the_failed_and_cancelled_documents_again_and_drops_the_report(
    ended_run: tuple[Engine, str, list[int]],
) -> None:
    engine, run_id, (failed, cancelled, *_) = ended_run
    plan = start_retry(engine, run_id)
    assert (plan.document_ids, plan.was, plan.had_report) == ([failed, cancelled], "failed", True)
    assert statuses(engine, run_id) == {"pending": 2, "extracted": 1, "skipped": 1}
    run = run_row(engine, run_id)
    assert run.status == "running" and run.error is None and run.finished_at is None
    assert reports_of(engine, run_id) == []
    with session_scope(engine) as session:
        attempts = dict(
            session.execute(select(Document.id, Document.attempts).where(Document.run_id == run_id))
            .tuples()
            .all()
        )
    assert attempts[failed] == attempts[cancelled] == 0, "a new round counts its attempts from 0"
    assert [(r.document_id, r.round, r.status, r.error, r.attempts) for r in _rounds(engine, run_id)] == [
        (failed, 1, "failed", "was failed", 5),
        (cancelled, 1, "cancelled", "was cancelled", 5),
    ]


def test_retry_takes_what_it_is_asked_for_and_says_why_it_leaves_the_rest(
    ended_run: tuple[Engine, str, list[int]],
) -> None:
    engine, run_id, (failed, cancelled, extracted, skipped) = ended_run
    with pytest.raises(RetryRefused, match="not a document of run"):
        start_retry(engine, run_id, document_ids=[failed, 10**9])
    assert statuses(engine, run_id)["failed"] == 1, "a refused retry changes nothing"
    plan = start_retry(engine, run_id, document_ids=[cancelled, extracted, skipped])
    assert plan.document_ids == [cancelled]
    assert [doc for doc, _ in plan.left] == [extracted, skipped]
    assert start_retry(engine, run_id, failed=True).document_ids == [failed]
    assert start_retry(engine, run_id).document_ids == [], "nothing left to retry"


def _halfway(engine: Engine, run_id: str) -> bool:
    """A document of the run is being extracted and has one chunk answered: its second is
    being asked, its third is not yet."""
    with session_scope(engine) as session:
        running = session.execute(
            select(Document.id, func.count(Chunk.completed_at))
            .join(Chunk, Chunk.document_id == Document.id)
            .where(Document.run_id == run_id, Document.status == "running")
            .group_by(Document.id)
        ).all()
    return any(answered == 1 for _, answered in running)


def _ids(engine: Engine, run_id: str, status: str) -> list[int]:
    with session_scope(engine) as session:
        return list(
            session.scalars(select(Document.id).where(Document.run_id == run_id, Document.status == status))
        )


def _answered(engine: Engine, run_id: str) -> set[tuple[int, int]]:
    with session_scope(engine) as session:
        rows = session.execute(
            select(Chunk.document_id, Chunk.idx)
            .join(Document, Document.id == Chunk.document_id)
            .where(Document.run_id == run_id, Chunk.completed_at.is_not(None))
        ).tuples()
        return {(int(d), int(i)) for d, i in rows}


def _rounds(engine: Engine, run_id: str) -> list[DocumentAttempt]:
    with session_scope(engine) as session:
        found = list(
            session.scalars(
                select(DocumentAttempt)
                .where(DocumentAttempt.run_id == run_id)
                .order_by(DocumentAttempt.document_id, DocumentAttempt.round)
            )
        )
        session.expunge_all()
        return found


def _dead_letters(engine: Engine, run_id: str) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("select reason_class, count(*) from dead_letters where run_id = :run group by reason_class"),
            {"run": run_id},
        ).tuples()
        return {str(reason): int(n) for reason, n in rows}


def test_a_retry_during_the_synthesis_leaves_no_stale_report_and_the_run_running(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    """`pipeline retry` lands while the run's report is being made (between its totals and its
    save: the synthesis's guard, the last step before it writes): the report is not written and
    the run stays running, so the retry's own finalize reports the retried document once it ends
    (before, the run became completed with a report counting a document as running, forever)."""
    from pipeline.context import Context
    from pipeline.core.settings import Settings
    from pipeline.llm.client import LLMClient
    from pipeline.reporting.synthesize import synthesize_run

    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    write_filings(tmp_path, 2, seed=305, sizes=[21_000] * 2)
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    failed, extracted = sorted(plan.document_ids)
    with session_scope(engine) as session:
        run_state.mark_stored(session, plan.run_id)
        for doc_id, status in ((failed, "failed"), (extracted, "extracted")):
            session.execute(update(Document).where(Document.id == doc_id).values(status=status, error=status))
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        database_url=pipeline_env["PIPELINE_DATABASE_URL"],
        llm_base_url="http://127.0.0.1:9/v1",
    )
    llm = LLMClient(settings, pool_size=1)  # no call is made: the answer is given
    retried: list[list[int]] = []

    def retry_meanwhile() -> None:
        retried.append(start_retry(engine, plan.run_id, failed=True).document_ids)

    status = synthesize_run(
        Context(settings, engine, llm), plan.run_id, answer="(given)", guard=retry_meanwhile
    )
    llm.close()
    assert retried == [[failed]]
    assert status == RunStatus.RUNNING, "the synthesis was dropped"
    assert reports_of(engine, plan.run_id) == [], "no stale report"
    assert run_row(engine, plan.run_id).status == "running"
    assert statuses(engine, plan.run_id) == {"pending": 1, "extracted": 1}


def test_a_cancel_whose_flag_comes_after_a_retry_stops_nothing_and_the_run_goes_on(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path
) -> None:
    """The race of a cancel and a retry: the cancel's database step, then the retry (documents
    pending, run running, the flag cleared), then the cancel's flag set late. The workers' check
    finds the run running in the database: the flag is stale and removed, no call is stopped, and
    a delivery that met the flag before cancels no retried document of the running run (before,
    they were cancelled and the synthesis refused, the run running with no report for 7 days)."""
    from pipeline.context import Context, stop_check
    from pipeline.core.settings import Settings
    from pipeline.llm.client import LLMClient
    from pipeline.llm.ratelimit import RedisLimiter
    from pipeline.llm.stops import StopFlags
    from pipeline.runs.cancel import cancel_run, document_reason
    from pipeline.storage import run_documents
    from tests.conftest import claimed_redis_db

    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    write_filings(tmp_path, 2, seed=307, sizes=[21_000] * 2)
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    first, second = sorted(plan.document_ids)
    with session_scope(engine) as session:
        run_state.mark_stored(session, plan.run_id)
        session.execute(update(Document).where(Document.id == first).values(status="extracted"))
    with claimed_redis_db(redis_base) as url:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            database_url=pipeline_env["PIPELINE_DATABASE_URL"],
            redis_url=url,
            llm_base_url="http://127.0.0.1:9/v1",
        )
        llm = LLMClient(settings, pool_size=1, limiter=RedisLimiter.from_settings(settings, 1))
        flags = StopFlags(llm.limiter.client)  # type: ignore[union-attr]
        cancel_run(engine, settings, plan.run_id, "the test", None)  # its database step ...
        assert statuses(engine, plan.run_id) == {"extracted": 1, "cancelled": 1}
        assert start_retry(engine, plan.run_id).document_ids == [second]  # ... a retry ...
        flags.clear(plan.run_id)
        flags.stop(plan.run_id, document_reason("the test"))  # ... and the cancel's flag, late
        check = stop_check(Context(settings, engine, llm), plan.run_id)
        assert check is not None
        check()  # no RunCancelled: the run is running in the database
        assert flags.reason(plan.run_id) is None, "the stale flag is removed"
        with session_scope(engine) as session:  # a delivery that met the flag before the retry
            assert run_documents.cancel_documents(session, plan.run_id, "late", [second]) == 0
        assert statuses(engine, plan.run_id) == {"extracted": 1, "pending": 1}
        assert run_row(engine, plan.run_id).status == "running"
        cancel_run(engine, settings, plan.run_id, "the test again", flags)  # a real cancel still stops
        with pytest.raises(errors.RunCancelled):
            check()
        flags.clear(plan.run_id)
        llm.close()
