"""The Celery tasks themselves, run by an in-process worker (Celery's `celery_worker` fixture)
against real Redis, Postgres and the session's simulator: what a redelivered or early message
does. Tests where a worker process has to die live in test_chaos.py.

The app is the project's own (`workers.app.app`, its tasks and settings), pointed at a Redis
database of its own, so the session's worker processes never take these messages.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import Engine, func, select

from pipeline.core.settings import get_settings
from pipeline.ingest.producer import SubmitPlan, prepare_run
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, Extraction, LLMCall, Report, Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import claimed_redis_db, eventually

WAIT_S = 60.0


@pytest.fixture(scope="module")
def task_broker(pipeline_env: dict[str, str], redis_base: str) -> Iterator[str]:
    """A Redis database for this module's messages alone."""
    with claimed_redis_db(redis_base) as url:
        yield url


@pytest.fixture
def celery_app(task_broker: str) -> Iterator[Celery]:
    """The project's app, sending to and reading results from the module's Redis database."""
    from workers.app import app

    saved = {key: app.conf[key] for key in ("broker_url", "result_backend")}
    # A plain Redis result backend: these tests wait on results, which the project's
    # send-only backend never subscribes to.
    app.conf.update(broker_url=task_broker, result_backend=task_broker)
    yield app
    app.conf.update(saved)


@pytest.fixture(scope="session")
def celery_worker_parameters() -> dict[str, object]:
    """Both of the project's queues. No ping check: Celery's test `ping` task is registered on
    its own test apps only; start-up waits for the consumer all the same."""
    from pipeline.core.constants import EXTRACT_QUEUE, REPORT_QUEUE

    return {"queues": (EXTRACT_QUEUE, REPORT_QUEUE), "perform_ping_check": False, "shutdown_timeout": 30.0}


@pytest.fixture(scope="session")
def celery_worker_pool() -> str:
    return "threads"


def _reports(engine: Engine, run_id: str) -> int:
    with session_scope(engine) as session:
        return int(session.scalar(select(func.count()).where(Report.run_id == run_id)) or 0)


def _calls(engine: Engine, run_id: str) -> int:
    with session_scope(engine) as session:
        return int(session.scalar(select(func.count()).where(LLMCall.run_id == run_id)) or 0)


def _settled_calls(engine: Engine, run_id: str) -> int:
    """The run's recorded calls once no more arrive: the report's hedged synthesis records its
    slower copy after the report (a full suite's load once put it after the count)."""
    found = _calls(engine, run_id)
    while True:
        time.sleep(1.0)
        if (again := _calls(engine, run_id)) == found:
            return found
        found = again


def _stored_run(pipeline_env: dict[str, str], directory: Path, seed: int) -> tuple[Engine, SubmitPlan]:
    """Two filings stored as a run, nothing enqueued yet."""
    write_filings(directory, 2, seed=seed, sizes=[21_000] * 2)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    return engine, prepare_run(engine, get_settings(), [str(directory)])


@pytest.mark.usefixtures("celery_worker")
def test_a_redelivered_extract_or_finalize_changes_nothing(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    from workers.canvas import enqueue_run
    from workers.extract_tasks import extract
    from workers.run_tasks import finalize

    engine, plan = _stored_run(pipeline_env, tmp_path, seed=95)
    enqueue_run(plan.run_id, plan.document_ids)
    eventually("the run's chord wrote no report", lambda: _reports(engine, plan.run_id) == 1)
    calls = _settled_calls(engine, plan.run_id)
    assert calls > 0

    # At-least-once delivery: the same messages again find everything final.
    assert [extract.delay(d).get(timeout=WAIT_S) for d in plan.document_ids] == ["extracted"] * 2
    assert finalize.delay(plan.run_id).get(timeout=WAIT_S) == "done"
    assert _calls(engine, plan.run_id) == calls, "a redelivery called the LLM again"
    assert _reports(engine, plan.run_id) == 1


@pytest.mark.usefixtures("celery_worker")
def test_task_results_in_redis_expire_within_a_day(
    pipeline_env: dict[str, str], task_broker: str, tmp_path: Path
) -> None:
    """Under `noeviction`, results kept a week piled up night after night."""
    import redis

    from workers.app import RESULT_EXPIRES_S
    from workers.extract_tasks import extract

    _, plan = _stored_run(pipeline_env, tmp_path, seed=96)
    assert extract.delay(plan.document_ids[0]).get(timeout=WAIT_S) == "extracted"
    client = redis.Redis.from_url(task_broker)
    keys = list(client.scan_iter(match="celery-task-meta-*", count=1000))
    assert keys
    assert all(0 < int(client.ttl(key)) <= RESULT_EXPIRES_S <= 24 * 3600 for key in keys)
    client.close()


@pytest.mark.usefixtures("celery_worker")
def test_finalize_before_every_document_is_final_waits_for_them(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    """The chord's callback checks completeness in the database, not in the chord's results."""
    from workers.extract_tasks import extract
    from workers.run_tasks import finalize

    engine, plan = _stored_run(pipeline_env, tmp_path, seed=97)
    early = finalize.delay(plan.run_id)
    eventually("finalize did not wait for the documents", lambda: early.state == "RETRY")
    assert _reports(engine, plan.run_id) == 0

    for document_id in plan.document_ids:
        assert extract.delay(document_id).get(timeout=WAIT_S) == "extracted"
    eventually(
        "finalize never fired once the documents were final", lambda: _reports(engine, plan.run_id) == 1
    )
    with session_scope(engine) as session:
        run = session.get(Run, plan.run_id)
        assert run is not None and run.status == "completed"
        statuses = set(session.scalars(select(Document.status).where(Document.run_id == plan.run_id)))
    assert statuses == {"extracted"}


def test_a_document_counts_as_extracted_only_once_its_summary_is_written(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    """Finalize compresses every extracted document without a summary: if a document counted as
    extracted while its own task still compressed it, the two would compress it twice."""
    from pipeline.extraction.extract import CallRecord, CustomResult, GroundedExtraction, extract_document
    from workers.context import worker_context
    from workers.extract_tasks import _summarize

    engine, plan = _stored_run(pipeline_env, tmp_path, seed=98)
    document_id = plan.document_ids[0]
    seen: list[str] = []

    def compress(
        query: str, result: GroundedExtraction | CustomResult, sink: Callable[[CallRecord], None]
    ) -> str | None:
        with session_scope(engine) as session:
            seen.append(str(session.scalar(select(Document.status).where(Document.id == document_id))))
        return _summarize(query, result, sink)

    assert extract_document(worker_context(), document_id, summarize=compress) == "extracted"
    with session_scope(engine) as session:
        status, summary = session.execute(
            select(Document.status, Extraction.summary)
            .join(Extraction, Extraction.document_id == Document.id)
            .where(Document.id == document_id)
        ).one()
    assert seen == ["running"] and status == "extracted" and summary


@pytest.mark.usefixtures("celery_worker")
def test_a_compress_that_gave_up_stores_its_fallback_so_no_finalize_pays_for_it_again(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 28, defect 6: a compress that gave up left the document without a summary, so
    every finalize sent again (a reclaim's, a resume's, past the report lock) sent its compress
    once more, paying again. Its give-up now stores the summary made from the fields."""
    from sqlalchemy import update

    from pipeline.extraction.extract import extract_document
    from pipeline.storage import run_state
    from workers.context import worker_context
    from workers.report_tasks import compress

    engine, plan = _stored_run(pipeline_env, tmp_path, seed=99)
    document_id = plan.document_ids[0]
    assert extract_document(worker_context(), document_id) == "extracted"  # no summary
    with session_scope(engine) as session:  # the budget is spent: the compress gives up
        session.execute(update(Run).where(Run.id == plan.run_id).values(budget_usd=0.0))
    assert compress.delay(document_id).get(timeout=WAIT_S) == "fallback"
    with session_scope(engine) as session:
        summary = session.scalar(select(Extraction.summary).where(Extraction.document_id == document_id))
        waiting = run_state.extracted_ids(session, plan.run_id, without_summary=True)
    assert document_id not in waiting, "a finalize sent again would compress it again"
    assert summary and "fiscal" in summary


def test_the_escalation_endpoint_is_paced_and_guarded_as_the_main_one(
    pipeline_env: dict[str, str], sim_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47, defect 6: with PIPELINE_ESCALATE_BASE_URL, the escalation client had no limiter
    (its spend went uncounted until the 60 s reconcile, and a $0.05 budget spent $0.23) and no
    circuit breaker. It has both now, on the limiter's Redis, scoped to its own endpoint."""
    from pipeline.core.settings import get_settings
    from workers import context

    monkeypatch.setenv("PIPELINE_ESCALATE_MODEL", "strong-1")
    monkeypatch.setenv("PIPELINE_ESCALATE_BASE_URL", sim_url)
    get_settings.cache_clear()
    context._reset_after_fork()
    try:
        ctx = context.worker_context()
        assert ctx.escalation is not None and ctx.escalation.limiter is not None
        assert ctx.escalation.circuit is not None and ctx.llm.circuit is not None
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
        context._reset_after_fork()
