"""Liveness from progress, not from being alive: a lease is renewed only while the blocking calls
of its work end within their bounds, against the real database and Redis, time moved through
the clock's seam (`pipeline.storage.clock.moved`) instead of slept through; and one real-process
test, a worker whose limiter's Redis never answers."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine, func, select

from pipeline.core import errors, progress
from pipeline.core.errors import LeaseLost
from pipeline.core.settings import Settings, get_settings
from pipeline.extraction.schemas import FilingExtraction
from pipeline.ingest.producer import prepare_run
from pipeline.llm.client import LLMClient
from pipeline.llm.ratelimit import Limits, RedisLimiter, Scope
from pipeline.recovery.heartbeat import Heartbeat, Reclaimed, reclaim
from pipeline.recovery.leases import Leases
from pipeline.runtime import embedded
from pipeline.storage import clock, document_leases, documents
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, Extraction, Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import (
    WORKER_READY_TIMEOUT_S,
    claimed_redis_db,
    eventually,
    pipeline_child,
    run_cli,
    running_simulator,
    stored,
)

LEASE_S = 30.0
ANSWER = FilingExtraction(
    company="A", fiscal_year=2024, revenue_usd=None, revenue_quote=None, risk_factors=[]
)


class SilentPeer:
    """A listening socket that accepts connections and never answers (a failover, a NAT that
    dropped the connection): until `end`, which answers `reply` (if any) and goes away."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(10)
        self.port = self.listener.getsockname()[1]
        self.connection: socket.socket | None = None

    def connected(self) -> None:
        """Until a client connected: its call is under way."""
        self.connection, _ = self.listener.accept()

    def end(self, reply: bytes = b"") -> None:
        self.listener.close()
        if self.connection is not None:
            if reply:
                self.connection.sendall(reply)
            self.connection.close()


def _started(engine: Engine, tmp_path: Path, leases: Leases) -> tuple[int, int]:
    """A document of a run of its own, leased to `leases`: (id, fence)."""
    write_filings(tmp_path, 1, seed=91, sizes=[21_000])
    (doc_id,) = prepare_run(engine, get_settings(), [str(tmp_path)]).document_ids
    with session_scope(engine) as session:
        doc = document_leases.start_document(
            session, doc_id, 3, leases.owner, leases.lease_s, scope=leases.scope
        )
        assert doc is not None
        return doc_id, doc.fence


def _left_s(engine: Engine, doc_id: int) -> float:
    """How long the document's lease still runs, as this process's clock sees it now."""
    with session_scope(engine) as session:
        doc = session.get(Document, doc_id)
        assert doc is not None and doc.lease_expires_at is not None
        expires = doc.lease_expires_at
        expires = expires if expires.tzinfo else expires.replace(tzinfo=UTC)
        return (expires - clock.now(session)).total_seconds()


@contextmanager
def _blocked(
    leases: Leases, doc_id: int, fence: int, peer: SilentPeer, call: Callable[[], object], reply: bytes
) -> Iterator[list[BaseException]]:
    """`call` to `peer` under the document's lease in a thread of its own (a chunk's thread),
    until the block ends and `peer` answers `reply`: yields what the call raised, filled once
    the thread ended."""
    raised: list[BaseException] = []

    def run() -> None:
        with leases.holding(doc_id, fence):
            try:
                call()
            except BaseException as exc:
                raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield raised
    finally:
        peer.end(reply)
        thread.join(15)
        assert not thread.is_alive(), "the blocked call never ended"


def _limiter_round_trip(peer: SilentPeer) -> Callable[[], object]:
    settings = Settings(
        _env_file=None,
        redis_url=f"redis://127.0.0.1:{peer.port}/0",
        llm_base_url="http://127.0.0.1:9/v1",
        rate_limit_rpm=60,
    )  # type: ignore[call-arg]
    limiter = RedisLimiter.from_settings(settings, 1)
    assert limiter is not None
    return lambda: limiter.try_acquire(Scope("http://127.0.0.1:9/v1", "m"), 10, "permit-1")


def _model_call(peer: SilentPeer) -> Callable[[], object]:
    settings = Settings(
        _env_file=None,
        llm_base_url=f"http://127.0.0.1:{peer.port}/v1",
        llm_api_key="sk-test-silent",
        llm_timeout_s=60.0,
    )  # type: ignore[call-arg]
    llm = LLMClient(settings, pool_size=1)
    return lambda: llm.text(
        [{"role": "user", "content": "hi"}], stage="extract", max_tokens=5, sink=lambda _: None
    )


REFUSED = b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


@pytest.mark.parametrize(
    ("make_call", "within_s", "reply"),
    [
        pytest.param(_limiter_round_trip, 0.0, b"", id="a round trip to the limiter's Redis"),
        pytest.param(_model_call, 60.0, REFUSED, id="a call to the model (60 s HTTP timeout)"),
    ],
)
def test_a_thread_blocked_past_its_calls_bound_loses_its_lease_and_its_late_write_is_refused(
    engine: Engine,
    redis_client: redis.Redis,
    tmp_path: Path,
    make_call: Callable[[SilentPeer], Callable[[], object]],
    within_s: float,
    reply: bytes,
) -> None:
    """The review's defect: the heartbeat renewed every lease its threads held, whatever they were
    doing, so a thread blocked on a peer that never answers kept its document for good. Now a
    call keeps its lease up to its bound (its own measure, plus a lease), and no further: the
    process's own heartbeat takes the document back, and the thread's write is refused."""
    leases = Leases(lease_s=LEASE_S, owner=f"host:1:stuck-{uuid.uuid4().hex[:6]}")
    beat = Heartbeat(engine, redis_client, leases, lambda taken: None, lambda run_id: None)
    doc_id, fence = _started(engine, tmp_path, leases)
    bound_s = within_s + LEASE_S
    peer = SilentPeer()
    with _blocked(leases, doc_id, fence, peer, make_call(peer), reply) as raised:
        peer.connected()
        beat.renew()
        assert _left_s(engine, doc_id) == pytest.approx(LEASE_S, abs=1)
        with clock.moved(bound_s - 1):  # within its bound: renewed, up to the bound and no further
            beat.renew()
            assert 0 < _left_s(engine, doc_id) <= 1.5, "renewed past the call's bound"
            assert doc_id not in [
                i.document_id for i in reclaim(engine, redis_client, leases, lambda t: None)
            ]
        with clock.moved(bound_s + 1):  # past it: not renewed, and taken back by its own heartbeat
            beat.renew()
            assert _left_s(engine, doc_id) < 0, "the stuck thread's lease was renewed"
            sent: list[list[Reclaimed]] = []
            taken = [i for i in reclaim(engine, redis_client, leases, sent.append) if i.document_id == doc_id]
            assert [(i.document_id, i.owner) for i in taken] == [(doc_id, leases.owner)]
    # The call ended at last (its peer answered or went away) ...
    assert raised and isinstance(raised[0], (redis.RedisError, errors.PipelineError)), raised
    with session_scope(engine) as session:  # ... and what its thread writes is refused
        chunk = documents.chunks_of(session, doc_id)[0]
        with pytest.raises(LeaseLost):
            documents.save_chunk_result(session, chunk, fence, ANSWER, model="m", prompt_version="v")
    doc = _doc(engine, doc_id)
    assert (doc.status, doc.lease_owner, doc.reclaims, doc.reclaimed_from) == (
        "running",
        None,
        1,
        leases.owner,
    )


def _doc(engine: Engine, document_id: int) -> Document:
    return stored(engine, Document, document_id)


def test_a_limiter_wait_whose_redis_keeps_answering_keeps_its_lease(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A call waits its turn (6 a minute, paced: 10 s after the first), in a sleep longer than a
    lease: it is a blocking call as long as the wait, so its lease is renewed through it, up to
    the sleep's length plus a lease; and again once the sleep ends and the limiter answers."""
    lease_s = 2.0
    leases = Leases(lease_s=lease_s, owner=f"host:2:waits-{uuid.uuid4().hex[:6]}")
    beat = Heartbeat(engine, redis_client, leases, lambda taken: None, lambda run_id: None)
    doc_id, fence = _started(engine, tmp_path, leases)
    slept: list[float] = []

    def sleep(wait_s: float) -> None:  # the limiter's seam: the beats come during its sleep
        slept.append(wait_s)
        beat.renew()
        with clock.moved(wait_s + lease_s - 0.5):
            beat.renew()
            assert _left_s(engine, doc_id) > 0 and leases.working(doc_id), "renewed through the wait"
        with clock.moved(wait_s + lease_s + 0.5):
            beat.renew()
            assert _left_s(engine, doc_id) < 0 and not leases.working(doc_id), "not past its bound"

    limiter = RedisLimiter(
        redis_client,
        Limits(rpm=6, burst_s=0.0),
        lease_s=60,
        recovery_s=300,
        min_factor=0.2,
        max_wait_s=120,
        sleep=sleep,
    )
    scope = Scope("http://127.0.0.1:9/v1", f"m-{uuid.uuid4().hex[:6]}")
    with leases.holding(doc_id, fence):
        limiter.acquire([scope], 10)
        limiter.acquire([scope], 10)
        assert slept and slept[0] > lease_s, slept
        with clock.moved(slept[0] + lease_s + 0.5):  # the sleep ended: renewed again
            beat.renew()
            assert _left_s(engine, doc_id) == pytest.approx(lease_s, abs=0.5)
            assert leases.working(doc_id)


def test_a_stuck_threads_document_may_be_started_by_another_thread_of_its_process() -> None:
    """The document a stuck thread held is sent again by its reclaim; the delivery may land on
    the same process, whose other thread must not take it for a duplicate of the stuck one's.
    A thread that is in no blocking call (its chunks queued behind others' in the pool, say)
    keeps its lease however long that lasts."""
    leases = Leases(lease_s=LEASE_S, owner="host:3:pool")
    now = datetime.now(UTC)
    with leases.claiming(7) as first, leases.holding(7, 1):
        assert first
        with leases.claiming(7) as duplicate:
            assert not duplicate, "another thread works on it"
        assert leases.renewals(now + timedelta(hours=1)) == {7: (1, LEASE_S)}, "queued, not stuck"
        with progress.blocking():
            assert leases.renewals(now) == {7: (1, LEASE_S)}
            assert leases.renewals(now + timedelta(seconds=LEASE_S - 10)) == {7: (1, 10.0)}
            assert leases.renewals(now + timedelta(seconds=LEASE_S + 1)) == {}
            assert not leases.working(7)
            with leases.claiming(7) as again, leases.holding(7, 2):
                assert again, "the stuck thread no longer counts"
                with leases.claiming(7) as third:
                    assert not third, "one delivery takes its place, not every one"
                assert leases.renewals(now + timedelta(seconds=LEASE_S + 2)) == {7: (2, LEASE_S)}
            assert leases.holds(7), "the stuck thread still claims it"
    assert not leases.holds(7)


# The real-process test: a worker whose limiter's Redis accepts connections and never answers.

HUNG_LEASE_S = 3.0


def test_a_worker_whose_limiter_never_answers_loses_its_document_to_another_within_two_leases(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two real workers of one thread each. The first's PIPELINE_LIMITER_REDIS_URL is a socket
    that accepts and never answers: the document it takes is stuck in a round trip to it. Its
    own heartbeat stops renewing the lease at the round trip's bound (a lease) and sends the
    document again; the other worker (the stuck one's only thread is busy) extracts it, within
    two leases of the moment the stuck worker took it (both on the database's clock). Before,
    the heartbeat renewed the stuck thread's lease all along: the document waited for the
    client's socket timeouts (10 s here: the structured-output mode's read, then the limiter's),
    and then for a retry that may come back to the same worker."""
    write_filings(tmp_path, 2, seed=93, sizes=[9_000] * 2)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    logs = tmp_path_factory.mktemp("liveness")
    silent = socket.create_server(("127.0.0.1", 0), backlog=64)
    with claimed_redis_db(redis_base) as redis_url, running_simulator(logs, "--p50", "0.05") as sim:
        env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_BASE_URL": sim,
            "PIPELINE_LEASE_S": str(HUNG_LEASE_S),
        }
        hung_env = {**env, "PIPELINE_LIMITER_REDIS_URL": f"redis://127.0.0.1:{silent.getsockname()[1]}/0"}
        tag = uuid.uuid4().hex[:6]
        stuck, other = children = [
            pipeline_child(
                f"{n}-{tag}@%h",
                ["worker", "--concurrency", "1", "--name", f"{n}-{tag}@%h"],
                embedded.child_env(e),
                logs / f"{n}.log",
            )
            for n, e in (("stuck", hung_env), ("other", env))
        ]
        try:
            embedded.wait_until_ready(children, WORKER_READY_TIMEOUT_S)
            submitted = run_cli("submit", str(tmp_path), env=env)
            assert submitted.returncode == 0, submitted.stderr
            run_id = submitted.stdout.strip().splitlines()[-1]

            def ended() -> bool:
                with session_scope(engine) as session:
                    run = session.get(Run, run_id)
                    return run is not None and run.status in ("completed", "failed")

            eventually("the run ended", ended, timeout_s=90)
            assert stuck.problem() is None and other.problem() is None
        finally:
            embedded.stop_all(children)
            silent.close()
    with session_scope(engine) as session:
        assert session.get(Run, run_id).status == "completed"  # type: ignore[union-attr]
        docs = session.scalars(select(Document).where(Document.run_id == run_id)).all()
        extractions = session.scalar(
            select(func.count())
            .select_from(Extraction)
            .where(Extraction.document_id.in_([d.id for d in docs]))
        )
    assert extractions == 2 and {d.status for d in docs} == {"extracted"}
    taken = [d for d in docs if d.reclaimed_from]
    assert taken, "the stuck worker's document was never taken from it"
    for doc in taken:  # (it may also have taken the second, once its thread came back from the first)
        assert doc.reclaimed_from is not None and doc.reclaimed_from.split(":")[1] == str(stuck.process.pid)
        assert doc.started_at is not None and doc.finished_at is not None
        took_s = (doc.finished_at - doc.started_at).total_seconds()
        assert took_s <= 2 * HUNG_LEASE_S, (
            f"extracted elsewhere {took_s:.1f} s after the stuck worker took it"
        )
        print(f"the stuck worker's document {doc.id} was extracted elsewhere {took_s:.1f} s after it took it")
