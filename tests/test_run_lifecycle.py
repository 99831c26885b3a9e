"""A run's lifecycle as finalize and the heartbeat read it (issue 28, defects 2 and 3): never
reported before the producer stored all of it; a stalled run whose documents end moves again
and is reported."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, select, update

from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.runs import finalize
from pipeline.storage import run_state
from pipeline.storage.db import session_scope
from pipeline.storage.models import DocStatus, Document, Run, RunStatus, utcnow
from pipeline_dev.synth_filings import write_filings

SCOPE = "test-lifecycle"


@pytest.fixture
def run_id(engine: Engine, tmp_path: Path) -> Iterator[str]:
    """A stored run of two documents, both extracted (as its workers of deployment SCOPE left
    them), with no report: what finalize and the stranded-run finisher decide on."""
    write_filings(tmp_path, 2, seed=61, sizes=[21_000, 21_000])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    with session_scope(engine) as session:
        session.execute(
            update(Document)
            .where(Document.run_id == plan.run_id)
            .values(status=DocStatus.EXTRACTED, finished_at=utcnow(), lease_scope=SCOPE)
        )
    yield plan.run_id
    with session_scope(engine) as session:
        session.execute(delete(Run).where(Run.id == plan.run_id))


def _set(engine: Engine, run_id: str, **values: object) -> None:
    with session_scope(engine) as session:
        session.execute(update(Run).where(Run.id == run_id).values(**values))


def _stranded(engine: Engine) -> list[str]:
    with session_scope(engine) as session:
        return run_state.stranded_runs(session, quiet_s=0.0, scope=SCOPE)


def test_a_run_whose_stored_documents_all_ended_is_reported_only_once_the_producer_stored_it(
    engine: Engine, run_id: str
) -> None:
    _set(engine, run_id, stored_at=None)  # the producer is still reading later files
    assert finalize.next_step(engine, run_id).action == "wait"
    assert run_id not in _stranded(engine)
    _set(engine, run_id, stored_at=utcnow())
    assert finalize.next_step(engine, run_id).action == "report"
    assert run_id in _stranded(engine)


def test_a_stalled_run_whose_documents_ended_is_reported(engine: Engine, run_id: str) -> None:
    _set(engine, run_id, status=RunStatus.STALLED)  # the watchdog saw no activity for a while
    assert finalize.next_step(engine, run_id).action == "report"
    assert run_id in _stranded(engine)


def test_a_stalled_run_moves_again_when_one_of_its_documents_ends(engine: Engine, run_id: str) -> None:
    with session_scope(engine) as session:
        first = session.scalar(select(Document.id).where(Document.run_id == run_id).limit(1))
        assert first is not None
        session.execute(update(Document).where(Document.id == first).values(status=DocStatus.RUNNING))
    _set(engine, run_id, status=RunStatus.STALLED)
    assert finalize.next_step(engine, run_id).action == "stalled"  # one still unfinished
    with session_scope(engine) as session:
        session.execute(update(Document).where(Document.id == first).values(status=DocStatus.EXTRACTED))
    assert finalize.ready_to_report(engine, first) == run_id  # the delivery that ended it
    with session_scope(engine) as session:
        assert run_state.run_status(session, run_id) == RunStatus.RUNNING


def test_a_cancelled_run_is_not_reported(engine: Engine, run_id: str) -> None:
    _set(engine, run_id, status=RunStatus.CANCELLED)
    assert finalize.next_step(engine, run_id).action == "cancelled"


def test_a_batch_whose_ingestion_keeps_failing_counts_towards_its_give_up(
    engine: Engine, run_id: str
) -> None:
    """Issue 28, defect 8: each poll's good retrieve reset the failure count, so a batch whose
    ingestion failed every time never reached the five-failure give-up, paying for its repairs
    at every poll. Only a batch that moves on starts the count again."""
    from pipeline.storage import batches

    with session_scope(engine) as session:
        row = batches.create(session, run_id, [], tokens=0)
        batch_id = row.id
    for expected in (1, 2, 3):
        with session_scope(engine) as session:  # the retrieve finds the same ended batch
            batches.update_row(session, batch_id, status="completed", completed=2)
            assert batches.note_failure(session, batch_id, "ingesting failed") == expected
    with session_scope(engine) as session:  # lines stored: it moved on
        batches.update_row(session, batch_id, output_lines_done=2, failures=0)
        assert batches.note_failure(session, batch_id, "again") == 1


def test_a_host_whose_clock_runs_ahead_does_not_finish_a_run_early(
    engine: Engine, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28, defect 1: the quiet period before the heartbeats finish a run is measured on the
    database's clock, the one its documents ended on, not on the deciding host's."""
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite is one host's file: its host's clock is the only clock (Postgres under CI)")
    from datetime import UTC, datetime, timedelta

    ahead = datetime.now(UTC) + timedelta(seconds=45)
    monkeypatch.setattr("pipeline.storage.models.utcnow", lambda: ahead)  # the host's clock
    with session_scope(engine) as session:  # its documents ended just now: not quiet for 30 s yet
        assert run_id not in run_state.stranded_runs(session, quiet_s=30.0, scope=SCOPE)
