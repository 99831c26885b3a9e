"""A batch run's poll as the heartbeat restarts it (issue 28, one clock): a poll is quiet when
the database's clock says so, not the deciding host's; and (issue 47) only where the run's
batches went: a deployment on another endpoint that shares the database neither restarts its
poll nor polls its batches."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import openai
import pytest
import redis
from sqlalchemy import Engine, delete, select, update

from pipeline.context import Context
from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.llm.client import LLMClient
from pipeline.recovery.heartbeat import batch_chain, restart_batch_polls
from pipeline.recovery.leases import Leases
from pipeline.recovery.steps import step_key
from pipeline.runs import batching
from pipeline.storage import batches, clock, run_state
from pipeline.storage.db import session_scope
from pipeline.storage.models import LLMBatch, Run, RunStatus
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.synth_filings import write_filings

QUIET_S = 60.0
STALE_S = 3600.0


@pytest.fixture
def polled_run(engine: Engine, client: redis.Redis, tmp_path: Path) -> Iterator[str]:
    """A stored batch run, running, whose batches were polled a moment ago."""
    write_filings(tmp_path, 1, seed=282, sizes=[8_000])
    run_id = prepare_run(engine, get_settings(), [str(tmp_path)]).run_id
    with session_scope(engine) as session:
        run_state.set_mode(session, run_id, "batch", "test: batch polls", None)
        session.execute(update(Run).where(Run.id == run_id).values(status=RunStatus.RUNNING))
        batches.touch_poll(session, run_id)
    client.set(step_key(batch_chain(run_id)), "a chain of this deployment", ex=3600)  # its chain ran here
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


@pytest.mark.parametrize("never_polled", [False, True], ids=["polled-elsewhere", "never-polled"])
def test_a_quiet_run_polled_by_another_deployment_is_not_restarted_here_until_stale(
    engine: Engine, client: redis.Redis, polled_run: str, never_polled: bool
) -> None:
    """Issue 47: any worker's heartbeat restarted the batch polls of every run in its database,
    against its own endpoint. A run whose chain of polls ran in another deployment (no chain
    lease in this Redis) is left to it; only one quiet for an hour (its deployment's Redis lost
    the lease with its data, or the deployment is gone) is restarted here. A run just stored
    there and not polled yet is quiet from its storing, not an hour quiet at once (the session's
    workers ticked a test's run against their endpoint: a flaky budget test in a full suite)."""
    client.delete(step_key(batch_chain(polled_run)))  # its chain ran in another deployment
    if never_polled:
        with session_scope(engine) as session:
            session.execute(update(Run).where(Run.id == polled_run).values(batch_polled_at=None))
    polled: list[str] = []
    leases = Leases(lease_s=30.0)
    with clock.moved(QUIET_S + 1):
        restart_batch_polls(engine, client, leases, polled.append, QUIET_S, STALE_S)
    assert polled_run not in polled, "restarted the poll of a run another deployment polls"
    with clock.moved(STALE_S + 1):
        restart_batch_polls(engine, client, leases, polled.append, QUIET_S, STALE_S)
    # Only this run's restart is asked about: a run another test left in the session's database
    # is an hour quiet on the moved clock too.
    assert [run for run in polled if run == polled_run] == [polled_run]


def _context(base_url: str, engine: Engine) -> Context:
    settings = get_settings().model_copy(update={"llm_base_url": base_url, "llm_model": "sim-1"})
    return Context(settings, engine, LLMClient(settings, pool_size=1))


def _rows(engine: Engine, run_id: str) -> list[tuple[str, str | None, int, str | None]]:
    """The run's batch rows: status, the provider's id, failures in a row, error."""
    with session_scope(engine) as session:
        rows = session.scalars(select(LLMBatch).where(LLMBatch.run_id == run_id).order_by(LLMBatch.id))
        return [(row.status, row.provider_batch_id, row.failures, row.error) for row in rows]


def _polled_at(engine: Engine, run_id: str) -> object:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.batch_polled_at


def test_a_tick_at_another_endpoint_leaves_the_runs_batches_alone(engine: Engine, polled_run: str) -> None:
    """Issue 47: a poll restarted by a deployment on another endpoint read the run's batch there,
    got 404, gave the batch up and sent its lines again at its own endpoint: paid twice. Its
    tick asks its endpoint first: one that does not hold the batch leaves the row, the poll's
    time and its own endpoint untouched; the run's own endpoint goes on polling it."""
    config = SimConfig(p50_s=0, p95_s=0, seed=47, batch_duration_s=30.0)
    with SimServer(config) as own, SimServer(config) as other:
        at_own, at_other = _context(own.base_url, engine), _context(other.base_url, engine)
        try:
            assert batching.tick(at_own, polled_run).submitted == 1
            before, polled = _rows(engine, polled_run), _polled_at(engine, polled_run)
            outcome = batching.tick(at_other, polled_run)
            after, polled_after = _rows(engine, polled_run), _polled_at(engine, polled_run)
            uploaded = openai.OpenAI(base_url=other.base_url, api_key="sim").files.list().data
            again = batching.tick(at_own, polled_run)
        finally:
            at_own.llm.close()
            at_other.llm.close()
    assert after == before, "the batch was given up (or counted a failure) and its lines sent again"
    assert [row[2:] for row in after] == [(0, None)]
    assert uploaded == [], "lines were sent again at the other endpoint"
    assert polled_after == polled, "the other endpoint's tick marked the run polled"
    assert (outcome.elsewhere, outcome.submitted, outcome.dispatch) == (True, 0, False)
    assert not again.elsewhere and _polled_at(engine, polled_run) != polled, "its own endpoint polls on"
