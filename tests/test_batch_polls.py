"""A batch run's poll as the heartbeat restarts it (issue 28, one clock): a poll is quiet when
the database's clock says so, not the deciding host's."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine, delete, update

from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.recovery.heartbeat import restart_batch_polls
from pipeline.recovery.leases import Leases
from pipeline.storage import batches, clock, run_state
from pipeline.storage.db import session_scope
from pipeline.storage.models import Run, RunStatus
from pipeline_dev.synth_filings import write_filings

QUIET_S = 60.0


@pytest.fixture
def polled_run(engine: Engine, client: redis.Redis, tmp_path: Path) -> Iterator[str]:
    """A stored batch run, running, whose batches were polled a moment ago."""
    write_filings(tmp_path, 1, seed=282, sizes=[8_000])
    run_id = prepare_run(engine, get_settings(), [str(tmp_path)]).run_id
    with session_scope(engine) as session:
        run_state.set_mode(session, run_id, "batch", "test: batch polls", None)
        session.execute(update(Run).where(Run.id == run_id).values(status=RunStatus.RUNNING))
        batches.touch_poll(session, run_id)
    yield run_id
    with session_scope(engine) as session:
        session.execute(delete(Run).where(Run.id == run_id))
    for key in client.scan_iter(match=f"*{run_id}*"):
        client.delete(key)


def test_a_host_whose_clock_runs_ahead_does_not_restart_a_batch_poll_early(
    engine: Engine, client: redis.Redis, polled_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll's time was written on the database's clock; a heartbeat whose host runs minutes
    ahead measures the quiet period on that clock too, and restarts the poll only once it is
    quiet there."""
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite is one host's file: its host's clock is the only clock (Postgres under CI)")
    ahead = datetime.now(UTC) + timedelta(minutes=5)
    for module in ("pipeline.recovery.heartbeat", "pipeline.storage.batches", "pipeline.storage.models"):
        monkeypatch.setattr(f"{module}.utcnow", lambda: ahead, raising=False)
    polled: list[str] = []
    leases = Leases(lease_s=30.0)
    restart_batch_polls(engine, client, leases, polled.append, QUIET_S)
    assert polled_run not in polled, "restarted a poll polled a moment ago"
    with clock.moved(QUIET_S + 1):  # quiet on the database's clock: restarted, once per lease
        restart_batch_polls(engine, client, leases, polled.append, QUIET_S)
        restart_batch_polls(engine, client, leases, polled.append, QUIET_S)
    assert polled.count(polled_run) == 1


def test_a_cancelled_runs_lost_poll_is_restarted_while_a_batch_of_it_is_open(
    engine: Engine, polled_run: str
) -> None:
    """A cancelled run's poll ingests what its batches answered before their cancel ended: if
    its chain of ticks is lost, the heartbeat restarts it, until no batch of it is open."""
    with session_scope(engine) as session:
        session.execute(update(Run).where(Run.id == polled_run).values(status=RunStatus.CANCELLED))
        row = batches.create(session, polled_run, [], 0)
        batches.update_row(session, row.id, status="cancelling")
    with clock.moved(QUIET_S + 1), session_scope(engine) as session:
        assert polled_run in batches.overdue_runs(session, QUIET_S)
        batches.update_row(session, row.id, status=batches.INGESTED)
        assert polled_run not in batches.overdue_runs(session, QUIET_S), "nothing open: its poll is over"
