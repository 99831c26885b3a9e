"""Leases on documents in flight, against the real database and Redis: one live lease at a time,
writes fenced by the lease's token, and reclaim of a dead owner's documents by a live worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine, create_engine, select

from pipeline.core.errors import LeaseLost
from pipeline.core.settings import get_settings
from pipeline.extraction.schemas import FilingExtraction
from pipeline.ingest.producer import prepare_run
from pipeline.recovery import deliveries
from pipeline.recovery.heartbeat import (
    Heartbeat,
    Reclaimed,
    finish_stranded,
    live_workers,
    reclaim,
    reclaim_deliveries,
    redelivery_grace_s,
    worker_key,
)
from pipeline.recovery.leases import Leases
from pipeline.recovery.steps import StepLease
from pipeline.storage import clock, document_leases, documents, reclaims
from pipeline.storage.db import session_scope
from pipeline.storage.models import Document
from pipeline_dev.synth_filings import write_filings
from tests.conftest import stored

ANSWER = FilingExtraction(
    company="A", fiscal_year=2024, revenue_usd=None, revenue_quote=None, risk_factors=[]
)


def _documents(engine: Engine, tmp_path: Path, count: int) -> list[int]:
    write_filings(tmp_path, count, seed=71, sizes=[21_000] * count)
    return list(prepare_run(engine, get_settings(), [str(tmp_path)]).document_ids)


def _doc(engine: Engine, document_id: int) -> Document:
    return stored(engine, Document, document_id)


def test_a_running_document_under_a_live_lease_is_not_started_again(engine: Engine, tmp_path: Path) -> None:
    """The review's defect: a resume or the watchdog enqueued a running document, and a second
    worker extracted (and paid for) it again."""
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        first = document_leases.start_document(session, doc_id, 3, "worker-a", lease_s=60)
        assert first is not None and first.fence == 1
    with session_scope(engine) as session:
        assert document_leases.start_document(session, doc_id, 3, "worker-b", lease_s=60) is None
        assert document_leases.start_document(session, doc_id, 3, "worker-a", lease_s=60) is None, (
            "a's other thread"
        )
    doc = _doc(engine, doc_id)
    assert (doc.lease_owner, doc.fence, doc.attempts) == ("worker-a", 1, 1)


def test_a_holder_that_lost_its_lease_cannot_write(engine: Engine, tmp_path: Path) -> None:
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        old = document_leases.start_document(
            session, doc_id, 3, "slow", lease_s=0
        )  # its lease runs out at once
        assert old is not None
        old_fence = old.fence
    with session_scope(engine) as session:
        new = document_leases.start_document(session, doc_id, 3, "new", lease_s=60)
        assert new is not None and new.fence == old_fence + 1
        chunk = documents.chunks_of(session, doc_id)[0]
        session.expunge(chunk)
    for late_write in (
        lambda session: documents.save_chunk_result(
            session, chunk, old_fence, ANSWER, model="m", prompt_version="v"
        ),
        lambda session: document_leases.mark_extracted(session, doc_id, old_fence),
    ):
        with pytest.raises(LeaseLost), session_scope(engine) as session:
            late_write(session)
    with session_scope(engine) as session:
        document_leases.fail_document(session, doc_id, "the slow worker's verdict", old_fence)
    assert _doc(engine, doc_id).status == "running", "a failure from the old owner is refused too"
    with session_scope(engine) as session:
        documents.save_chunk_result(session, chunk, new.fence, ANSWER, model="m", prompt_version="v")
        document_leases.mark_extracted(session, doc_id, new.fence)
    doc = _doc(engine, doc_id)
    assert (doc.status, doc.lease_owner) == ("extracted", None)


def test_a_give_up_after_another_delivery_took_the_document_fails_nothing(
    engine: Engine, tmp_path: Path
) -> None:
    """Defect 7: the task layer's give-up (its last retry failed) is fenced by its attempt's
    lease. It used to need only 'no lease held, or mine', so a worker whose document another
    delivery had taken and handed back since could still fail it."""
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        first = document_leases.start_document(session, doc_id, 5, "gives-up", lease_s=60)
        assert first is not None
        document_leases.release_for_retry(session, doc_id, first.fence, grace_s=60)  # a transient error
    with session_scope(engine) as session:  # meanwhile a duplicate delivery took it, and handed it back
        second = document_leases.start_document(session, doc_id, 5, "another", lease_s=60)
        assert second is not None
        document_leases.release_for_retry(session, doc_id, second.fence, grace_s=60)
    with session_scope(engine) as session:
        document_leases.fail_document(session, doc_id, "gave up after 4 attempts", first.fence)
    assert _doc(engine, doc_id).status == "running", "a stale attempt's verdict is refused"
    with session_scope(engine) as session:
        document_leases.fail_document(session, doc_id, "gave up after 4 attempts", second.fence)
    assert _doc(engine, doc_id).status == "failed"


def test_a_lease_its_owner_could_not_release_is_taken_over_by_the_same_process(
    engine: Engine, tmp_path: Path
) -> None:
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        assert document_leases.start_document(session, doc_id, 3, "me", lease_s=60) is not None
    with session_scope(engine) as session:  # the retry arrives here; no thread works on it
        again = document_leases.start_document(session, doc_id, 3, "me", lease_s=60, owner_idle=True)
        assert again is not None and again.fence == 2


def test_a_handed_back_document_is_free_for_its_retry_and_not_reclaimed(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        doc = document_leases.start_document(session, doc_id, 3, "dead-owner", lease_s=0)
        assert doc is not None
        document_leases.release_for_retry(session, doc_id, doc.fence, grace_s=60)
    sent: list[list[Reclaimed]] = []
    taken = reclaim(engine, redis_client, Leases(owner="live"), sent.append)
    assert doc_id not in [item.document_id for item in taken]
    with session_scope(engine) as session:
        assert document_leases.start_document(session, doc_id, 3, "retry", lease_s=60) is not None


def test_a_live_worker_reclaims_the_documents_of_a_dead_one_once(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    dead_ids = _documents(engine, tmp_path / "a", 2)
    (alive_id,) = _documents(engine, tmp_path / "b", 1)
    with session_scope(engine) as session:
        for doc_id in dead_ids:
            assert document_leases.start_document(session, doc_id, 3, "host:1:dead", lease_s=0) is not None
        assert document_leases.start_document(session, alive_id, 3, "host:2:slow", lease_s=0) is not None
    redis_client.set(worker_key("host:2:slow"), '{"at": 0}', ex=60)  # its lease ran out, but it beats
    sent: list[list[Reclaimed]] = []
    first, second = Leases(owner="host:3:a"), Leases(owner="host:4:b")
    mine = {*dead_ids, alive_id}  # the database is shared with the session's other tests
    taken = [item for item in reclaim(engine, redis_client, first, sent.append) if item.document_id in mine]
    assert sorted(item.document_id for item in taken) == sorted(dead_ids)
    assert {item.owner for item in taken} == {"host:1:dead"}
    again = reclaim(engine, redis_client, second, sent.append)
    assert not [item for item in again if item.document_id in mine], "the first took them"
    for doc_id in dead_ids:
        doc = _doc(engine, doc_id)
        assert (doc.reclaims, doc.reclaimed_from, doc.lease_owner) == (1, "host:1:dead", None)
        with session_scope(engine) as session:  # the reclaim's delivery starts it
            assert document_leases.start_document(session, doc_id, 3, "host:3:a", lease_s=60) is not None
    assert _doc(engine, alive_id).reclaims == 0


def test_what_a_dead_worker_received_but_never_started_is_sent_again_once(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A worker killed between a message's arrival and its document's lease left the document
    pending with no lease to reclaim, and the run waited for the broker's visibility timeout
    (hours): a clean CI run's chaos test once did. Live workers now send such documents again."""
    unstarted, started, leased, other = _documents(engine, tmp_path, 4)
    dead, live = Leases(owner="host:21:dead"), Leases(owner="host:22:live")
    for n, doc_id in enumerate((unstarted, started, leased)):
        deliveries.note_received(redis_client, dead.owner, doc_id, f"task-{n}", 0)
    dead.handled(deliveries.delivery(started, "task-1", 0))
    deliveries.keep(redis_client, dead.owner, dead.take_handled())  # its last beat
    with session_scope(engine) as session:
        assert document_leases.start_document(session, leased, 3, dead.owner, lease_s=60) is not None
    deliveries.note_received(redis_client, live.owner, other, "task-3", 0)
    deliveries.keep(redis_client, live.owner, [])
    redis_client.set(worker_key(live.owner), "{}", ex=60)  # the live one beats; the dead one's key ran out

    sent: list[list[Reclaimed]] = []
    first, second = Leases(lease_s=30, owner="host:23:a"), Leases(lease_s=30, owner="host:24:b")
    taken = reclaim_deliveries(engine, redis_client, first, sent.append)
    assert [(item.document_id, item.owner) for item in taken] == [(unstarted, dead.owner)]
    assert sent == [taken]
    assert reclaim_deliveries(engine, redis_client, second, sent.append) == [], "the first took them"
    assert not redis_client.exists(deliveries.received_key(dead.owner))
    assert redis_client.smembers(deliveries.RECEIVERS_KEY) == {live.owner.encode()}
    doc = _doc(engine, unstarted)
    assert (doc.status, doc.lease_owner, doc.reclaims, doc.reclaimed_from) == ("running", None, 1, dead.owner)
    assert _doc(engine, leased).reclaims == 0, "a leased document is the lease reclaim's"
    assert unstarted not in [
        item.document_id for item in reclaim(engine, redis_client, second, lambda _: None)
    ]
    with clock.moved(31):  # no new delivery started it within its grace: the deployment's reclaim sees it
        assert unstarted in [
            item.document_id for item in reclaim(engine, redis_client, second, lambda _: None)
        ]
    with session_scope(engine) as session:  # the new delivery starts it
        assert document_leases.start_document(session, unstarted, 3, first.owner, lease_s=60) is not None
    deliveries.forget(redis_client, live.owner)
    assert not redis_client.exists(deliveries.received_key(live.owner), deliveries.RECEIVERS_KEY)


def test_a_reclaim_skips_a_document_a_transaction_holds_and_takes_it_later(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A worker paused (SIGSTOP) inside a transaction holds its document's row until Postgres
    ends the transaction. The reclaim leaves that row for a later beat instead of waiting on its
    lock (a lock timeout on the reclaim's connection turns a wait into an error here)."""
    if engine.dialect.name != "postgresql":
        pytest.skip("row locks: Postgres")
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        assert document_leases.start_document(session, doc_id, 3, "host:1:paused", lease_s=0) is not None
    impatient = create_engine(engine.url, connect_args={"options": "-c lock_timeout=2000"})
    reclaimer = Leases(owner="host:5:r")
    try:
        with engine.connect() as paused:
            with paused.begin():
                paused.execute(select(Document.id).where(Document.id == doc_id).with_for_update())
                taken = reclaim(impatient, redis_client, reclaimer, lambda _: None)
                assert doc_id not in [item.document_id for item in taken]
            taken = reclaim(impatient, redis_client, reclaimer, lambda _: None)  # the transaction ended
        assert doc_id in [item.document_id for item in taken]
    finally:
        impatient.dispose()


def test_a_document_whose_redelivery_waits_in_the_queue_is_sent_again_later_each_time(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A bench found each handed-back document of a long queue sent again every lease (its
    retry waits behind the whole queue): eight copies of a document in a 4-minute run."""
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        assert document_leases.start_document(session, doc_id, 3, "host:11:dead", lease_s=0) is not None
    leases = Leases(lease_s=30, owner="host:12:live")

    def reclaimed(after_s: float) -> bool:
        with clock.moved(after_s):
            return doc_id in [
                item.document_id for item in reclaim(engine, redis_client, leases, lambda t: None)
            ]

    assert reclaimed(0), "the dead owner's document"
    assert not reclaimed(29), "its delivery has a lease to start it"
    assert reclaimed(31), "its delivery did not start it within a lease"
    assert not reclaimed(31 + 59), "the second wait is twice as long"
    assert reclaimed(31 + 61)
    assert _doc(engine, doc_id).reclaims == 3
    assert [redelivery_grace_s(30, n) for n in (0, 1, 2, 7, 50)] == [30, 60, 120, 3840, 3840]


def test_the_heartbeat_renews_what_its_threads_hold_and_says_it_is_alive(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    held_id, dropped_id = _documents(engine, tmp_path, 2)
    leases = Leases(lease_s=3, owner="host:5:beat")
    with session_scope(engine) as session:
        held = document_leases.start_document(session, held_id, 3, leases.owner, lease_s=0)
        dropped = document_leases.start_document(session, dropped_id, 3, leases.owner, lease_s=0)
        assert held is not None and dropped is not None
        fence = held.fence
    beat = Heartbeat(
        engine, redis_client, leases, lambda taken: None, lambda run_id: None, name="worker-5@host"
    )
    with leases.holding(held_id, fence):
        beat.beat()
    assert _doc(engine, held_id).lease_owner == leases.owner, "renewed"
    assert _doc(engine, dropped_id).lease_owner is None, "its own leftover, taken back"
    (alive,) = [w for w in live_workers(redis_client) if w.owner == leases.owner]
    assert alive.name == "worker-5@host" and alive.held == 1
    assert redis_client.sismember(deliveries.RECEIVERS_KEY, leases.owner)
    beat.stop()
    assert redis_client.get(worker_key(leases.owner)) is None, "a stopped worker says so at once"
    assert not redis_client.sismember(deliveries.RECEIVERS_KEY, leases.owner), "the broker takes back its own"


def test_a_report_step_has_one_holder_and_a_lost_one_cannot_write(redis_client: redis.Redis) -> None:
    first, second = Leases(lease_s=30, owner="host:6:a"), Leases(lease_s=30, owner="host:7:b")
    with StepLease(redis_client, first, "synthesize:run-1") as holder:
        assert holder.taken and first.held_steps() == {holder.key: holder.token}
        assert 0 < int(redis_client.pttl(holder.key)) <= 30_000, "it runs out on Redis's clock"
        with StepLease(redis_client, second, "synthesize:run-1") as other:
            assert not other.taken, "a live synthesis of the run holds the step"
        holder.check()
        redis_client.delete(holder.key)  # what its TTL does once no heartbeat renews it (a dead holder)
        with StepLease(redis_client, second, "synthesize:run-1") as taker:
            assert taker.taken
            with pytest.raises(LeaseLost):
                holder.check()  # the first holder, woken, may not write the report
    assert redis_client.get("pipeline:step:synthesize:run-1") is None, "released when done"


def test_the_heartbeat_renews_the_report_steps_its_process_holds(
    engine: Engine, redis_client: redis.Redis
) -> None:
    leases = Leases(lease_s=30, owner="host:8:beat")
    beat = Heartbeat(engine, redis_client, leases, lambda taken: None, lambda run_id: None)
    with StepLease(redis_client, leases, "compress:42") as step:
        redis_client.pexpire(step.key, 500)  # about to run out
        beat.beat()
        assert int(redis_client.pttl(step.key)) > 25_000, "renewed by a whole lease"
        step.check()
    other = StepLease(redis_client, leases, "compress:43", token="not-this-process")
    assert other.take()
    redis_client.pexpire(other.key, 500)
    beat.beat()
    assert int(redis_client.pttl(other.key)) <= 500, "only the steps its threads are inside"


def test_after_a_reclaim_the_old_holder_writes_nothing_even_before_the_new_delivery_starts(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        old = document_leases.start_document(session, doc_id, 3, "host:9:gone", lease_s=0)
        assert old is not None
        fence = old.fence
    taken = reclaim(engine, redis_client, Leases(owner="host:10:live"), lambda taken: None)
    assert doc_id in [item.document_id for item in taken]
    with pytest.raises(LeaseLost), session_scope(engine) as session:
        document_leases.mark_extracted(session, doc_id, fence)


def test_a_lease_long_expired_is_reclaimed_whatever_deployment_it_names(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A Redis that lost its data gives the deployment a new id: the old id's leases are not left
    running for ever (only the watchdog would find them)."""
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        assert (
            document_leases.start_document(session, doc_id, 3, "host:11:old", lease_s=-60, scope="lost-id")
            is not None
        )
    # Ran out 60 s ago: left to its deployment for an hour; taken once it is that stale.
    other = Leases(owner="host:13:x", scope="new-id")
    assert doc_id not in [item.document_id for item in reclaim(engine, redis_client, other, lambda t: None)]
    taken = reclaim(engine, redis_client, other, lambda t: None, stale_s=50)
    assert doc_id in [item.document_id for item in taken]


def test_one_thread_of_a_process_starts_a_document_at_a_time() -> None:
    leases = Leases(owner="host:15:threads")
    with leases.claiming(7) as first:
        assert first and leases.holds(7)
        with leases.claiming(7) as second:
            assert not second, "a duplicate delivery to another thread of the process"
        assert leases.holds(7), "the duplicate's exit does not release the first claim"
    assert not leases.holds(7)


def test_a_host_whose_clock_runs_ahead_does_not_take_a_live_lease(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28, defect 1: a worker whose wall clock ran 45 s ahead took another's live 30 s lease on
    a duplicate delivery, and the first worker's calls were paid twice. Leases are decided on the
    database's clock now; the host's clock is set through its seam (`utcnow`)."""
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite is one host's file: its host's clock is the only clock (Postgres under CI)")
    (doc_id,) = _documents(engine, tmp_path, 1)
    with session_scope(engine) as session:
        first = document_leases.start_document(session, doc_id, 3, "host-a:1:x", lease_s=30)
        assert first is not None and first.fence == 1
    ahead = datetime.now(UTC) + timedelta(seconds=45)
    for module in ("pipeline.storage.documents", "pipeline.storage.models"):
        monkeypatch.setattr(f"{module}.utcnow", lambda: ahead)
    with session_scope(engine) as session:  # host b, 45 s ahead, with the same message
        assert document_leases.start_document(session, doc_id, 3, "host-b:1:y", lease_s=30) is None
        expired = [row[0] for row in reclaims.expired_leases(session, scope="", stale_s=3600)]
        assert doc_id not in expired  # nor does its heartbeat reclaim it
    doc = _doc(engine, doc_id)
    assert (doc.lease_owner, doc.fence) == ("host-a:1:x", 1)


def test_a_run_has_one_finalize_poller_at_a_time(redis_client: redis.Redis) -> None:
    """Issue 28, defect 6: each reclaim and resume sent one more finalize, and each polled every
    5 s until the run ended. The first to wait holds the place, renewed at its polls; the others
    end at once; a poller that died frees it after its TTL."""
    leases = Leases(lease_s=30, owner="host:9:poll")

    def poller(run_id: str, task_id: str) -> StepLease:
        return StepLease(redis_client, leases, f"finalize-poller:{run_id}", token=task_id, ttl_s=30)

    assert poller("run-1", "chord-finalize").take()
    assert not poller("run-1", "reclaim-finalize").take()
    assert poller("run-1", "chord-finalize").take()  # its next poll
    assert poller("run-2", "reclaim-finalize").take()  # another run's
    redis_client.delete(poller("run-1", "").key)  # what its TTL does once the poller died
    assert poller("run-1", "reclaim-finalize").take()


def test_a_new_batch_chain_supersedes_the_old_one(redis_client: redis.Redis) -> None:
    """The batch chain's id is a step lease too: the newest chain holds it, an older chain's
    next tick finds it taken and ends."""
    leases = Leases(lease_s=30, owner="host:10:tick")

    def link(chain: str) -> StepLease:
        return StepLease(redis_client, leases, "batch-chain:run-1", token=chain, ttl_s=3600)

    old = link("old")
    old.take_over()
    assert link("old").take(), "the chain's own next tick"
    link("new").take_over()  # a restart by the heartbeat, a resume
    assert not link("old").take()
    with pytest.raises(LeaseLost):
        old.check()


def test_a_heartbeat_job_that_raises_leaves_the_others_running(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Issue 28 (heartbeat jobs as separate units): one failing job, here the stranded-run
    finisher's `finish` and what the worker publishes, stops none of the others."""
    (held_id,) = _documents(engine, tmp_path, 1)
    leases = Leases(lease_s=3, owner="host:8:jobs")
    with session_scope(engine) as session:
        held = document_leases.start_document(session, held_id, 3, leases.owner, lease_s=0)
        assert held is not None
    ran: list[str] = []

    def broken() -> dict[str, str]:
        raise OSError("a hung mount")

    beat = Heartbeat(engine, redis_client, leases, lambda taken: None, lambda run_id: None, published=broken)
    jobs = [(name, job) for name, job in beat.jobs()]
    beat.jobs = lambda: [("first", lambda: 1 / 0), *jobs, ("last", lambda: ran.append("last"))]  # type: ignore[method-assign]
    with leases.holding(held_id, held.fence):
        beat.beat()
    assert _doc(engine, held_id).lease_owner == leases.owner, "renewed after a job that raised"
    assert [w for w in live_workers(redis_client) if w.owner == leases.owner], (
        "alive, without what it publishes"
    )
    assert ran == ["last"]
    beat.stop()


def test_a_dead_workers_received_set_past_postgres_parameter_limit_is_taken_back(
    engine: Engine, tmp_path: Path
) -> None:
    """Issue 28, defect 5: past 65,535 members, taking back a dead worker's deliveries failed on
    Postgres's limit of bound parameters, and with it every later job of every heartbeat."""
    (unstarted,) = _documents(engine, tmp_path, 1)
    received = [unstarted, *range(10**9, 10**9 + 70_000)]  # ids no row has, as a stale set holds
    with session_scope(engine) as session:
        taken = reclaims.reclaim_unstarted(session, received, "host:9:dead", grace_s=30, scope="")
    assert [document_id for document_id, _ in taken] == [unstarted]


def test_a_live_owners_lease_that_ran_out_more_than_a_lease_ago_is_taken_back(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A worker that beats but neither renews nor takes back its own lease (its reclaim job
    failing, say) holds the document no longer than two leases: the others take it then."""
    (doc_id,) = _documents(engine, tmp_path, 1)
    holder, other = Leases(owner="host:31:beats", lease_s=30), Leases(owner="host:32:b", lease_s=30)
    with session_scope(engine) as session:
        assert document_leases.start_document(session, doc_id, 3, holder.owner, lease_s=30) is not None
    redis_client.set(worker_key(holder.owner), "{}", ex=600)  # alive all along
    sent: list[list[Reclaimed]] = []
    with clock.moved(45):  # ran out 15 s ago: its owner may still renew it
        assert doc_id not in [i.document_id for i in reclaim(engine, redis_client, other, sent.append)]
    with clock.moved(61):  # ran out more than a lease ago
        taken = [i for i in reclaim(engine, redis_client, other, sent.append) if i.document_id == doc_id]
    assert [i.owner for i in taken] == [holder.owner]
    assert _doc(engine, doc_id).fence == 2, "the holder's late writes are refused"


def test_the_stranded_run_finisher_sends_each_quiet_run_once_a_lease(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A heartbeat job alone: a run whose documents all ended, quiet for a lease, with no
    report, is finalized by one worker of the deployment per lease; not before it is quiet."""
    doc_ids = _documents(engine, tmp_path, 2)
    first, second = (
        Leases(owner="host:41:a", lease_s=30, scope="fin"),
        Leases(owner="host:42:b", lease_s=30, scope="fin"),
    )
    with session_scope(engine) as session:
        for doc_id in doc_ids:
            doc = document_leases.start_document(session, doc_id, 3, first.owner, lease_s=30, scope="fin")
            assert doc is not None
            document_leases.mark_extracted(session, doc_id, doc.fence)
        run_id = doc.run_id
    sent: list[str] = []
    assert run_id not in finish_stranded(engine, redis_client, first, sent.append), "not quiet yet"
    with clock.moved(31):
        assert finish_stranded(engine, redis_client, first, sent.append) == [run_id]
        assert finish_stranded(engine, redis_client, second, sent.append) == [], "the first sent it"
    assert sent == [run_id]


def test_a_lease_its_thread_could_not_release_is_released_by_the_heartbeat(
    engine: Engine, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A heartbeat job alone: the release a thread could not make (the database was down) is
    made at the next beat, with no grace, so a reclaim sends the document again at once."""
    (doc_id,) = _documents(engine, tmp_path, 1)
    leases = Leases(owner="host:43:r", lease_s=30)
    with session_scope(engine) as session:
        doc = document_leases.start_document(session, doc_id, 3, leases.owner, lease_s=30)
        assert doc is not None
    leases.release_later(doc_id, doc.fence)
    beat = Heartbeat(engine, redis_client, leases, lambda taken: None, lambda run_id: None)
    beat.release_leftovers()
    assert leases.unreleased() == {}
    assert _doc(engine, doc_id).lease_owner is None
    taken = reclaim(engine, redis_client, Leases(owner="host:44:o"), lambda _: None)
    assert doc_id in [item.document_id for item in taken]
