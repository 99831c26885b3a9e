"""Chaos: workers killed, Redis and Postgres restarted, the LLM endpoint down, mid-run."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine, func, select

from pipeline.core.constants import EXTRACT_QUEUE
from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.recovery import deliveries
from pipeline.runtime.embedded import Child, free_port, start_redis, wait_for_port
from pipeline.storage.db import get_engine, session_scope, upgrade
from pipeline.storage.models import Chunk, Document, Extraction, LLMBatch, LLMCall, Report, Run
from pipeline_dev.bench.procs import sim_stats
from pipeline_dev.synth_filings import write_filings
from tests.conftest import claimed_redis_db, run_cli, running_simulator, running_workers
from tests.servers import private_postgres

OUTAGE_S = 4.0
"""How long the LLM endpoint stays down: long enough for every thread's call to fail and retry."""
WORK_TIMEOUT_S = 60.0
LEASE_S = 3.0
"""Short leases (heartbeat every second), so that a dead worker's documents come back in seconds."""


def held_extract_tasks(worker: Child) -> set[str]:
    """Extract tasks the worker received and has not finished, from its log."""
    assert worker.log_path is not None
    received, finished = set(), set()
    for line in worker.log_path.read_text(errors="replace").splitlines():
        match = re.search(r"Task pipeline\.extract\[([0-9a-f-]+)\] (received|succeeded|retry|failed)", line)
        if match:
            (received if match.group(2) == "received" else finished).add(match.group(1))
    return received - finished


def wait_for_calls(engine: Engine, run_id: str, count: int) -> None:
    """Until the run has `count` recorded LLM calls: it is under way."""
    deadline = time.monotonic() + WORK_TIMEOUT_S
    while True:
        with session_scope(engine) as session:
            calls = session.scalar(select(func.count()).where(LLMCall.run_id == run_id)) or 0
        if calls >= count:
            return
        assert time.monotonic() < deadline, f"the run made {calls} calls in {WORK_TIMEOUT_S:.0f} s"
        time.sleep(0.1)


def unfinished(engine: Engine, run_id: str) -> int:
    with session_scope(engine) as session:
        return int(
            session.scalar(
                select(func.count()).where(
                    Document.run_id == run_id, Document.status.not_in(["extracted", "failed", "skipped"])
                )
            )
            or 0
        )


def held_by(engine: Engine, run_id: str, worker: Child) -> int:
    """Documents of the run leased to the worker's process now (owner `host:pid:tag`)."""
    with session_scope(engine) as session:
        owners = session.scalars(
            select(Document.lease_owner).where(Document.run_id == run_id, Document.status == "running")
        )
        return sum(1 for owner in owners if owner and owner.split(":")[1] == str(worker.process.pid))


def wait_until_holding(engine: Engine, run_id: str, worker: Child) -> int:
    deadline = time.monotonic() + WORK_TIMEOUT_S
    while not (held := held_by(engine, run_id, worker)):
        assert time.monotonic() < deadline, "the worker never held a document of the run"
        time.sleep(0.05)
    time.sleep(0.5)  # ... and is mid-call with them
    return max(held, held_by(engine, run_id, worker))


@contextmanager
def short_leases(
    pipeline_env: dict[str, str], redis_base: str, logs: Path, *sim_args: str
) -> Iterator[tuple[dict[str, str], str]]:
    """A Redis database of its own and a simulator (`sim_args`), with short leases:
    (environment, simulator URL)."""
    with claimed_redis_db(redis_base) as redis_url, running_simulator(logs, *sim_args) as sim:
        env = {**pipeline_env, "PIPELINE_REDIS_URL": redis_url, "PIPELINE_LLM_BASE_URL": sim}
        env["PIPELINE_LEASE_S"] = str(LEASE_S)
        yield env, sim


@contextmanager
def two_workers_on_a_run(
    pipeline_env: dict[str, str], redis_base: str, filings: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[Child], dict[str, str], str, str]]:
    """A simulator, a broker and two workers of three threads, with short leases, running the
    run of `filings`: (workers, environment, run id, simulator URL)."""
    logs = tmp_path_factory.mktemp("chaos")
    with short_leases(pipeline_env, redis_base, logs, "--p50", "0.4", "--p95", "0.8") as (env, sim):
        with running_workers(env, logs, count=2, concurrency=3) as children:
            submitted = run_cli("submit", str(filings), env=env)
            assert submitted.returncode == 0, submitted.stderr
            yield children, env, submitted.stdout.strip().splitlines()[-1], sim


def test_a_worker_killed_mid_run_loses_nothing_and_the_run_completes_without_resume(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Its reserved messages stay unacknowledged for hours (the visibility timeout): the live
    worker's heartbeat reclaims the documents once their leases run out, and finalizes the run."""
    write_filings(tmp_path, 8, seed=51, sizes=[40_000] * 8)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with two_workers_on_a_run(pipeline_env, redis_base, tmp_path, tmp_path_factory) as stack:
        (victim, survivor), env, run_id, sim = stack
        wait_until_holding(engine, run_id, victim)
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(10)
        killed = time.monotonic()
        # What it held when it died (it may have ended a document between the look and the kill):
        # its leases stand until they run out, seconds from now.
        held = held_by(engine, run_id, victim)
        assert held and unfinished(engine, run_id) > 0, "the run was still going when the worker died"
        status = _wait_for_end(engine, run_id, quiet_s=60)
        recovered_s = time.monotonic() - killed
        assert status == "completed", status
        assert survivor.problem() is None
        shown = json.loads(run_cli("status", run_id, "--json", env=env).stdout)
        assert len(shown["workers"]) == 1, "the survivor's heartbeat alone is live"
        ((dead, count),) = shown["reclaimed"].items()
        assert dead.split(":")[1] == str(victim.process.pid) and count >= held
        sent = sim_stats(sim)["requests_total"]
    chunks, extract_calls = _assert_each_extracted_once(engine, run_id, 8)
    with session_scope(engine) as session:
        recorded = session.scalar(select(func.count()).where(LLMCall.run_id == run_id)) or 0
        reclaimed = session.scalar(
            select(func.count()).where(Document.run_id == run_id, Document.reclaims > 0)
        )
        resumes = session.get(Run, run_id).resumes  # type: ignore[union-attr]
    assert reclaimed and reclaimed >= held, "the dead worker's documents were reclaimed"
    assert resumes == 0
    # Repeated calls are bounded by what was in flight: each chunk answer is stored once. The
    # killed worker's in-flight calls reached the provider but were never recorded.
    assert chunks <= extract_calls <= chunks + 2 * 3
    lost_in_flight = sent - recorded
    # The killed worker had a call in flight on each of its three chunk-pool threads and, at most,
    # on each of its three task threads (a compression or a synthesis). (More, in full runs of the
    # suite, were this stack's heartbeats finishing other tests' runs: a deployment now finishes
    # its own.)
    assert 0 <= lost_in_flight <= 2 * 3, (
        f"the killed worker's threads were mid-call: {sent} sent, {recorded} recorded"
    )
    print(
        f"worker killed: held {held}, {reclaimed} reclaimed, run completed {recovered_s:.1f} s after the "
        f"kill; {chunks} chunks, {extract_calls} extract calls recorded, {lost_in_flight} lost in flight"
    )


def test_a_worker_killed_before_it_started_a_document_it_received_loses_nothing(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A clean CI run once lost the race between a message reaching a worker and the document's
    lease: the worker was killed in between, the document stayed pending with no lease to
    reclaim, and the run waited for the broker's visibility timeout (hours). Here a countdown
    holds the delivery received and unstarted when the worker is killed; a live worker sends
    the document again within about a lease."""
    from celery import Celery

    write_filings(tmp_path, 1, seed=53, sizes=[21_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    (doc_id,) = plan.document_ids
    logs = tmp_path_factory.mktemp("received")
    with short_leases(pipeline_env, redis_base, logs, "--p50", "0.05", "--p95", "0.1") as (env, _):
        client = redis.Redis.from_url(env["PIPELINE_REDIS_URL"])
        sender = Celery(broker=env["PIPELINE_REDIS_URL"])
        with running_workers(env, logs, count=1, concurrency=1) as (victim,):
            sender.send_task("pipeline.extract", args=[doc_id], countdown=600, queue=EXTRACT_QUEUE)
            deadline = time.monotonic() + WORK_TIMEOUT_S
            while not any(
                member.startswith(f"{doc_id}:".encode())
                for key in client.scan_iter(f"{deliveries.RECEIVED_PREFIX}*")
                for member in client.smembers(key)
            ):
                assert time.monotonic() < deadline, "the worker never received the delivery"
                time.sleep(0.05)
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait(10)
        with running_workers(env, logs, count=1, concurrency=1):
            status = _wait_for_end(engine, plan.run_id, quiet_s=8 * LEASE_S)
        sender.close()
        client.close()
    assert status == "completed", status
    with session_scope(engine) as session:
        doc = session.get(Document, doc_id)
        assert doc is not None
        assert doc.status == "extracted"
        assert doc.reclaimed_from is not None and doc.reclaimed_from.split(":")[1] == str(victim.process.pid)


def test_a_worker_paused_past_its_lease_writes_nothing_when_it_wakes(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """SIGSTOP (a long GC pause, a frozen VM): its leases run out and are reclaimed; woken, its
    threads finish their calls, and every write they try is refused by the fencing token."""
    # Filings of several chunks each: the worker is mid-document (and mid-call) when it is
    # paused, even on a slow machine where seeing its lease takes a while.
    write_filings(tmp_path, 6, seed=53, sizes=[100_000] * 6)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with two_workers_on_a_run(pipeline_env, redis_base, tmp_path, tmp_path_factory) as stack:
        (sleeper, survivor), _, run_id, _ = stack
        wait_until_holding(engine, run_id, sleeper)
        sleeper.process.send_signal(signal.SIGSTOP)
        paused = time.monotonic()
        held = held_by(engine, run_id, sleeper)
        assert held, "the worker finished its documents before the pause: nothing to test"
        deadline = paused + WORK_TIMEOUT_S
        while held_by(engine, run_id, sleeper):  # until every lease it held was taken over
            assert time.monotonic() < deadline, "its documents were never reclaimed"
            time.sleep(0.2)
        time.sleep(1.0)
        sleeper.process.send_signal(signal.SIGCONT)
        status = _wait_for_end(engine, run_id, quiet_s=60)
        recovered_s = time.monotonic() - paused
        assert status == "completed", status
        assert sleeper.problem() is None and survivor.problem() is None
        time.sleep(1.5)  # the woken threads' calls end and their writes are tried
    chunks, extract_calls = _assert_each_extracted_once(engine, run_id, 6)
    assert sleeper.log_path is not None
    refused = sleeper.log_path.read_text(errors="replace").count("its new holder carries on")
    assert refused >= 1, "the woken worker tried to write, and was refused"
    assert extract_calls <= chunks + 2 * 3, "only the calls in flight at the pause were made twice"
    print(
        f"worker paused: held {held}, run completed {recovered_s:.1f} s after the pause; {refused} late "
        f"attempts refused; {chunks} chunks, {extract_calls} extract calls recorded"
    )


def test_the_run_completes_after_the_llm_endpoint_was_down(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("outage")
    write_filings(tmp_path, 6, seed=53, sizes=[30_000] * 6)
    port = free_port()
    args = ["--port", str(port), "--p50", "0.3", "--p95", "0.6"]
    sim = Child("sim", [sys.executable, "-m", "pipeline", "sim", *args], log_path=logs / "sim.log")
    url = f"http://127.0.0.1:{port}/v1"
    with claimed_redis_db(redis_base) as redis_url:
        env = {**pipeline_env, "PIPELINE_REDIS_URL": redis_url, "PIPELINE_LLM_BASE_URL": url}
        with running_workers(env, logs, count=2, concurrency=3):
            wait_for_port(port)
            submitted = run_cli("submit", str(tmp_path), env=env)
            assert submitted.returncode == 0, submitted.stderr
            run_id = submitted.stdout.strip().splitlines()[-1]
            engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
            wait_for_calls(engine, run_id, 2)
            sim.stop()  # the provider goes away mid-run ...
            assert unfinished(engine, run_id) > 0
            time.sleep(OUTAGE_S)
            sim = Child("sim", [sys.executable, "-m", "pipeline", "sim", *args], log_path=logs / "sim2.log")
            with sim:  # ... and comes back: the run completes by itself (retries, no resume)
                deadline = time.monotonic() + 300
                while session_status(engine, run_id) not in ("completed", "failed"):
                    assert time.monotonic() < deadline, "the run did not complete after the outage"
                    time.sleep(0.5)
    assert session_status(engine, run_id) == "completed"
    with session_scope(engine) as session:
        docs = list(session.scalars(select(Document).where(Document.run_id == run_id)))
        unavailable = session.scalar(
            select(func.count()).where(LLMCall.run_id == run_id, LLMCall.status == "unavailable")
        )
    assert [d.status for d in docs] == ["extracted"] * 6
    assert unavailable, "calls failed during the outage and were retried"


def session_status(engine: Engine, run_id: str) -> str:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        return run.status if run else "missing"


def _wait_for_end(engine: Engine, run_id: str, quiet_s: float, timeout_s: float = 240) -> str:
    """Wait until the run ends, or until no document finished for `quiet_s`; its status."""
    deadline = time.monotonic() + timeout_s
    last_done, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        with session_scope(engine) as session:
            run = session.get(Run, run_id)
            assert run is not None
            done = session.scalar(
                select(func.count()).where(
                    Document.run_id == run_id, Document.status.in_(["extracted", "failed", "skipped"])
                )
            )
        if run.status in ("completed", "failed"):
            return run.status
        if done != last_done:
            last_done, last_change = int(done or 0), time.monotonic()
        elif time.monotonic() - last_change > quiet_s:
            return run.status
        time.sleep(0.5)
    return "timeout"


def _states(engine: Engine, run_id: str) -> list[tuple[object, ...]]:
    with session_scope(engine) as session:
        rows = session.execute(
            select(
                Document.id, Document.status, Document.lease_owner, Document.lease_expires_at, Document.fence
            ).where(Document.run_id == run_id)
        ).all()
    return [tuple(row) for row in rows]


def _assert_each_extracted_once(engine: Engine, run_id: str, count: int) -> tuple[int, int]:
    """Every document extracted once, one report; returns (chunks, extract calls recorded)."""
    with session_scope(engine) as session:
        docs = list(session.scalars(select(Document).where(Document.run_id == run_id)))
        assert [d.status for d in docs] == ["extracted"] * count, [(d.status, d.error) for d in docs]
        ids = [d.id for d in docs]
        assert session.scalar(select(func.count()).where(Extraction.document_id.in_(ids))) == count
        assert session.scalar(select(func.count()).where(Report.run_id == run_id)) == 1
        chunks = session.scalar(select(func.count()).where(Chunk.document_id.in_(ids)))
        calls = session.scalar(
            select(func.count()).where(LLMCall.run_id == run_id, LLMCall.stage == "extract")
        )
    return int(chunks or 0), int(calls or 0)


def test_a_redis_restart_mid_run_loses_nothing_and_recovers_without_an_operator(
    pipeline_env: dict[str, str], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Redis with AOF, as in docker-compose.yml, stops and comes back. The chord's callback is
    lost with the results of tasks that ended while it was away; the workers' heartbeats find
    the run with every document final and no report, and finalize it. No resume, no beat."""
    logs = tmp_path_factory.mktemp("redis-restart")
    write_filings(tmp_path, 8, seed=55, sizes=[40_000] * 8)
    redis_dir = logs / "redis"
    redis_server, redis_url = start_redis(redis_dir, appendonly=True)
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    try:
        with running_simulator(logs, "--p50", "0.4", "--p95", "0.8") as sim:
            env = {
                **pipeline_env,
                "PIPELINE_REDIS_URL": redis_url,
                "PIPELINE_LLM_BASE_URL": sim,
                "PIPELINE_LEASE_S": str(LEASE_S),
            }
            with running_workers(env, logs, count=2, concurrency=3) as children:
                submitted = run_cli("submit", str(tmp_path), env=env)
                assert submitted.returncode == 0, submitted.stderr
                run_id = submitted.stdout.strip().splitlines()[-1]
                wait_for_calls(engine, run_id, 3)
                redis_server.stop()  # SIGTERM: Redis writes its AOF and exits ...
                assert unfinished(engine, run_id) > 0, "the run was still going when Redis stopped"
                time.sleep(2.0)
                redis_server, _ = start_redis(redis_dir, port=port, appendonly=True)  # ... and is back
                back = time.monotonic()
                status = _wait_for_end(engine, run_id, quiet_s=60)
                assert status == "completed", (
                    f"the run did not recover by itself: {status}: {_states(engine, run_id)}"
                )
                assert all(child.problem() is None for child in children), "a worker died"
                elapsed = time.monotonic() - back
    finally:
        redis_server.stop()
    chunks, calls = _assert_each_extracted_once(engine, run_id, 8)
    with session_scope(engine) as session:
        resumes = session.get(Run, run_id).resumes  # type: ignore[union-attr]
    assert resumes == 0
    print(
        f"redis restart: {chunks} chunks, {calls} extract calls, completed {elapsed:.1f} s after Redis was back"
    )
    assert calls <= chunks + 2 * 3, "calls repeated beyond those in flight"


def test_a_postgres_restart_mid_run_is_retried_and_the_run_completes(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, pipeline_env: dict[str, str], redis_base: str
) -> None:
    logs = tmp_path_factory.mktemp("pg-restart")
    write_filings(tmp_path, 8, seed=57, sizes=[40_000] * 8)
    with (
        private_postgres() as postgres,
        claimed_redis_db(redis_base) as redis_url,
        running_simulator(logs, "--p50", "0.4", "--p95", "0.8") as sim,
    ):
        env = {
            **pipeline_env,
            "PIPELINE_DATABASE_URL": postgres.url,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_BASE_URL": sim,
        }
        upgrade(postgres.url)
        engine = get_engine(postgres.url)
        with running_workers(env, logs, count=2, concurrency=3) as children:
            submitted = run_cli("submit", str(tmp_path), env=env)
            assert submitted.returncode == 0, submitted.stderr
            run_id = submitted.stdout.strip().splitlines()[-1]
            wait_for_calls(engine, run_id, 3)
            assert unfinished(engine, run_id) > 0
            started = time.monotonic()
            postgres.stop("fast")  # every connection is cut ...
            time.sleep(3.0)
            postgres.start()  # ... and the database is back: tasks retry, no resume needed
            status = _wait_for_end(engine, run_id, quiet_s=120)
            elapsed = time.monotonic() - started
            assert status == "completed", status
            assert all(child.problem() is None for child in children), "a worker died"
        chunks, calls = _assert_each_extracted_once(engine, run_id, 8)
        engine.dispose()
    print(f"postgres restart: {chunks} chunks, {calls} extract calls, {elapsed:.0f} s after the stop")
    assert calls <= chunks + 2 * 3


def test_a_worker_killed_while_ingesting_a_batch_stores_and_asks_for_no_line_twice(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The worker reading a batch's output file dies between two of its transactions: a new
    worker's heartbeat restarts the batch poll, which reads the file again from the first line
    not committed. No chunk gets two answers or two call records, and nothing is asked again
    (one batch, no synchronous extraction call)."""
    logs = tmp_path_factory.mktemp("batch-kill")
    write_filings(tmp_path, 24, seed=61, sizes=[50_000] * 24)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with (
        claimed_redis_db(redis_base) as redis_url,
        running_simulator(logs, "--p50", "0.01", "--p95", "0.05", "--batch-duration", "1") as sim,
    ):
        env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_BASE_URL": sim,
            "PIPELINE_LEASE_S": str(LEASE_S),
            "PIPELINE_BATCH_POLL_S": "0.2",
            "PIPELINE_CHUNK_TOKENS": "1000",  # a few hundred lines: ingestion takes a few commits
        }
        with running_workers(env, logs, count=1, concurrency=2) as (victim,):
            submitted = run_cli("submit", str(tmp_path), "--fresh", "--mode", "batch", env=env)
            assert submitted.returncode == 0, submitted.stderr
            run_id = submitted.stdout.strip().splitlines()[-1]
            deadline = time.monotonic() + WORK_TIMEOUT_S
            while True:  # until the first lines are committed, and not the last
                with session_scope(engine) as session:
                    row = session.scalar(select(LLMBatch).where(LLMBatch.run_id == run_id))
                    if row is not None and row.output_lines_done and row.status != "ingested":
                        break
                assert time.monotonic() < deadline, "the batch was not ingested in time"
                time.sleep(0.005)
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait(10)
        with session_scope(engine) as session:
            row = session.scalar(select(LLMBatch).where(LLMBatch.run_id == run_id))
            assert row is not None
            done_at_kill, lines = row.output_lines_done, row.requests
        assert 0 < done_at_kill < lines, (done_at_kill, lines)
        with running_workers(env, tmp_path_factory.mktemp("batch-kill-2"), count=1, concurrency=2):
            assert _wait_for_end(engine, run_id, quiet_s=60) == "completed"
        stats = sim_stats(sim)
    chunks, extract_calls = _assert_each_extracted_once(engine, run_id, 24)
    with session_scope(engine) as session:
        modes = dict(
            list(
                session.execute(
                    select(LLMCall.mode, func.count())
                    .where(LLMCall.run_id == run_id, LLMCall.stage == "extract")
                    .group_by(LLMCall.mode)
                ).tuples()
            )
        )
        batches = session.scalar(select(func.count()).where(LLMBatch.run_id == run_id))
    assert chunks == lines and extract_calls == chunks and modes == {"batch": chunks}, (chunks, modes)
    assert batches == 1 and stats["batch_lines_answered"] == chunks, (batches, stats["batch_lines_answered"])
    print(
        f"killed after {done_at_kill} of {lines} lines were stored; the rest stored once by the next worker"
    )
