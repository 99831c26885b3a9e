"""A worker on another database than the producer's (PIPELINE_DATABASE_URL unset on its host, or
pointing elsewhere) never acknowledges a message as done: it sends it back to the queue, saying
why at ERROR, and takes no run's report lock. The documents stay pending in the producer's
database for a worker that knows them."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from sqlalchemy import delete

from pipeline.core.constants import EXTRACT_QUEUE, REPORT_QUEUE
from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.recovery.steps import step_key
from pipeline.runtime.embedded import Child
from pipeline.storage.db import get_engine, session_scope, upgrade
from pipeline.storage.models import Document, Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import claimed_redis_db, eventually, running_workers

WAIT_S = 60.0


@pytest.fixture(scope="module")
def elsewhere(
    pipeline_env: dict[str, str], redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """One real worker whose database is another (empty, migrated) one than the session's, on a
    broker of its own; the broker's URL and the worker's log."""
    logs = tmp_path_factory.mktemp("elsewhere")
    other = f"sqlite:///{logs / 'other.db'}"
    upgrade(other)
    with claimed_redis_db(redis_base) as broker:
        env = {**pipeline_env, "PIPELINE_REDIS_URL": broker, "PIPELINE_DATABASE_URL": other}
        with running_workers(env, logs, count=1, concurrency=2) as (worker,):
            yield broker, _log_of(worker)


def _log_of(worker: Child) -> Path:
    assert worker.log_path is not None
    return worker.log_path


def test_a_document_the_workers_database_lacks_goes_back_to_the_queue_not_done(
    pipeline_env: dict[str, str], elsewhere: tuple[str, Path], tmp_path: Path
) -> None:
    broker, log = elsewhere
    write_filings(tmp_path, 1, seed=83, sizes=[21_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])  # the producer's database
    (document_id,) = plan.document_ids
    sender = Celery(broker=broker, backend=broker)
    client = redis.Redis.from_url(broker)
    try:
        extract = sender.send_task("pipeline.extract", (document_id,), queue=EXTRACT_QUEUE)
        finalize = sender.send_task("pipeline.finalize", (plan.run_id,), queue=REPORT_QUEUE)

        def said(task_id: str, name: str, what: str) -> Callable[[], bool]:
            def seen() -> bool:
                text = log.read_text()
                return f"ERROR/MainProcess] {name} " in text and what in text and f"[{task_id}] retry" in text

            return seen

        eventually(
            "the extract was not sent back with its reason",
            said(extract.id, "pipeline.extract", f"document {document_id} is not in the database"),
        )
        eventually(
            "the finalize was not sent back with its reason",
            said(finalize.id, "pipeline.finalize", f"run {plan.run_id} is not in the database"),
        )
        text = log.read_text()
        assert "is PIPELINE_DATABASE_URL the one the producer used?" in text
        assert f"[{extract.id}] succeeded" not in text and f"[{finalize.id}] succeeded" not in text
        assert not client.exists(step_key(f"report:{plan.run_id}"))  # no report lock taken
        with session_scope(engine) as session:
            document = session.get(Document, document_id)
            assert document is not None and document.status == "pending"
    finally:
        client.close()
        sender.close()
        with session_scope(engine) as session:  # its rows go with it (ON DELETE CASCADE)
            session.execute(delete(Run).where(Run.id == plan.run_id))


@pytest.fixture(scope="module")
def at_home(
    pipeline_env: dict[str, str], redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """One real worker on the session's database (the producer's), on a broker of its own; the
    broker's URL and the worker's log."""
    logs = tmp_path_factory.mktemp("at_home")
    with claimed_redis_db(redis_base) as broker:
        env = {**pipeline_env, "PIPELINE_REDIS_URL": broker}
        with running_workers(env, logs, count=1, concurrency=2) as (worker,):
            yield broker, _log_of(worker)


def test_a_document_its_database_deleted_ends_its_message_and_one_never_issued_goes_back(
    pipeline_env: dict[str, str], at_home: tuple[str, Path], tmp_path: Path
) -> None:
    """`prune --all` of a just-cancelled run deletes documents whose messages are still queued:
    on the producer's database they end, acknowledged and said once with the reason (they were
    requeued every 600 s with an ERROR blaming PIPELINE_DATABASE_URL, forever). An id that
    database never issued still goes back to the queue, as on another database."""
    broker, log = at_home
    write_filings(tmp_path, 1, seed=89, sizes=[21_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    (deleted,) = plan.document_ids
    with session_scope(engine) as session:  # as `prune --all` deletes it (ON DELETE CASCADE)
        session.execute(delete(Run).where(Run.id == plan.run_id))
    never = deleted + 10**12
    sender = Celery(broker=broker, backend=broker)
    try:
        gone = sender.send_task("pipeline.extract", (deleted,), queue=EXTRACT_QUEUE)
        unknown = sender.send_task("pipeline.extract", (never,), queue=EXTRACT_QUEUE)
        assert gone.get(timeout=WAIT_S) == "deleted"
        eventually(
            "the never-issued id was not sent back",
            lambda: f"[{unknown.id}] retry" in log.read_text(),
        )
        text = log.read_text()
        lines = [
            line for line in text.splitlines() if f"document {deleted} was deleted from the database" in line
        ]
        assert len(lines) == 1 and "WARNING" in lines[0] and "prune --all" in lines[0], lines
        assert f"[{gone.id}] retry" not in text and "is PIPELINE_DATABASE_URL" not in "\n".join(lines)
        assert f"document {never} is not in the database" in text
    finally:
        sender.close()


def test_the_finalize_of_a_run_deleted_since_ends_said_once(
    pipeline_env: dict[str, str], at_home: tuple[str, Path], tmp_path: Path
) -> None:
    """Issue 47, item 5: after `prune --all` of a just-cancelled run, its queued extracts end
    (above), and then the chord's finalize fires for a run the database no longer has: it was
    sent back to the queue every 600 s forever, with an ERROR blaming PIPELINE_DATABASE_URL. The
    chord's finalize names one of the run's documents, an id this database issued and deleted
    since: it ends, acknowledged, with one WARNING."""
    from workers.canvas import finalize_args

    broker, log = at_home
    write_filings(tmp_path, 1, seed=91, sizes=[21_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    with session_scope(engine) as session:  # as `prune --all` deletes it
        session.execute(delete(Run).where(Run.id == plan.run_id))
    sender = Celery(broker=broker, backend=broker)
    try:
        finalize = sender.send_task(
            "pipeline.finalize", finalize_args(plan.run_id, plan.document_ids), queue=REPORT_QUEUE
        )
        assert finalize.get(timeout=WAIT_S) == "deleted"
        lines = [line for line in log.read_text().splitlines() if f"run {plan.run_id} was deleted" in line]
        assert len(lines) == 1 and "WARNING" in lines[0] and "prune --all" in lines[0], lines
        assert f"[{finalize.id}] retry" not in log.read_text()
    finally:
        sender.close()


def test_a_call_in_flight_for_a_deleted_document_is_said_with_its_cost(
    pipeline_env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 47, item 5: `prune --all` while a document's call is in flight: the answer is paid,
    and its row, naming a run and document that are gone, failed the write with a foreign-key
    error (the call's cost went unsaid). The run and its ledger are gone, so the call is left out
    and one WARNING says what it cost; the delivery ends as a deleted document's does."""
    from pipeline.core.errors import DeletedFromDatabase
    from pipeline.extraction.extract import CallRecord, CustomResult, GroundedExtraction, extract_document
    from workers import context
    from workers.extract_tasks import _summarize

    monkeypatch.setenv("PIPELINE_LLM_PRICES", "sim-1:1000/2000")
    get_settings.cache_clear()
    context._reset_after_fork()
    write_filings(tmp_path, 1, seed=93, sizes=[21_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    (document_id,) = plan.document_ids

    def deleted_meanwhile(
        query: str, result: GroundedExtraction | CustomResult, sink: Callable[[CallRecord], None]
    ) -> str | None:
        with session_scope(engine) as session:  # `prune --all` while the summary is asked for
            session.execute(delete(Run).where(Run.id == plan.run_id))
        return _summarize(query, result, sink)

    try:
        with caplog.at_level(logging.WARNING), pytest.raises(DeletedFromDatabase):
            extract_document(context.worker_context(), document_id, summarize=deleted_meanwhile)
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
        context._reset_after_fork()
    said = [r.getMessage() for r in caplog.records if "paid and not recorded" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"1 LLM call of run {plan.run_id}, deleted from the database while in flight")
    assert re.search(r"\(\d+ tokens, \$\d+\.\d{4}\)$", said[0]), said[0]
