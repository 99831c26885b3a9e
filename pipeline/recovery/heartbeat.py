"""Every worker process's heartbeat: it says the process is alive, renews the leases its threads
hold, and takes back the documents of owners that died.

One thread per process, every third of `PIPELINE_LEASE_S`:
- `pipeline:worker:<owner>` in Redis, expiring after one lease, says the process is alive (and
  what it holds, and the nightly inbox it reads there, for `pipeline status` and `pipeline beat`);
- the leases its threads work under are extended by one lease while their work makes progress
  (`Leases.renewals`: a thread blocked past its call's bound is not renewed), and those a thread
  could not release (the database was down) are released;
- running documents whose lease ran out, and whose owner has no live heartbeat (or is this
  process, its thread stuck), are taken back
  (a compare-and-set on owner and fence, so one worker does it) and sent again, with a finalize
  for their run: the run's chord still waits for the dead worker's unacknowledged messages,
  which Redis hands out again only after its visibility timeout;
- so are the pending documents whose delivery a dead owner had received but not started
  (`pipeline.recovery.deliveries`: no lease names them yet);
- runs whose documents are all final but whose report never came (the chord's callback was
  lost with a Redis restart) are finalized.

A killed worker's documents are sent again within about 1⅓ leases (under 60 s at 30 s).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from pipeline.core import keys
from pipeline.core.constants import REDIS_CLIENT_OPTIONS
from pipeline.recovery import deliveries, steps
from pipeline.recovery.leases import Leases
from pipeline.storage import batches, clock, document_leases, reclaims, run_state
from pipeline.storage.db import session_scope

if TYPE_CHECKING:
    from sqlalchemy import Engine

log = logging.getLogger(__name__)

STALE_AFTER_S = 3600.0
"""A lease that ran out this long ago is reclaimed whatever deployment it names (no live worker
lets its leases lapse for an hour: its deployment's id changed with a Redis that lost its data)."""
RECLAIM_DOUBLINGS_MAX = 7
"""A reclaimed document's redelivery waits at most 2**7 leases (64 minutes at the default 30 s)."""


def worker_key(owner: str) -> str:
    return keys.WORKER.of(owner)


def scope_of(client: redis.Redis) -> str:
    """The deployment's id, kept in its Redis (made by the first worker to ask): every worker of
    one broker has the same, however its URL is spelt. Leases carry it, so that workers judge
    alive or dead only owners whose heartbeats they can see."""
    client.set(keys.DEPLOYMENT.prefix, uuid.uuid4().hex[:16], nx=True)
    found: Any = client.get(keys.DEPLOYMENT.prefix)
    return found.decode() if isinstance(found, bytes) else str(found)


@dataclass(frozen=True)
class LiveWorker:
    owner: str
    name: str
    """The Celery worker's node name (`--name`), when it said."""
    held: int
    """Documents its threads were extracting at its last beat."""
    seconds_ago: float
    host: str = ""
    inbox: str | None = None
    """Its PIPELINE_INBOX (None: not set there)."""
    inbox_state: str = "unset"
    """Whether that host reads it: unset, missing, unreadable or readable (`inbox_state`)."""


def redis_time(client: redis.Redis) -> float:
    """Redis's clock, in seconds: a beat's `at` and its age are read on it, not on the hosts'."""
    seconds, micros = client.time()  # type: ignore[misc]
    return float(seconds) + float(micros) / 1e6


def live_workers(client: redis.Redis) -> list[LiveWorker]:
    """The worker processes whose heartbeat has not run out, from Redis."""
    found: list[LiveWorker] = []
    now = redis_time(client)
    for key in client.scan_iter(match=f"{keys.WORKER.prefix}*", count=500):
        raw: Any = client.get(key)
        if raw is None:
            continue
        try:
            beat = json.loads(raw)
        except ValueError:
            continue
        owner = key.decode() if isinstance(key, bytes) else str(key)
        found.append(
            LiveWorker(
                owner=owner.removeprefix(keys.WORKER.prefix),
                name=str(beat.get("name") or ""),
                held=int(beat.get("held") or 0),
                seconds_ago=max(0.0, now - float(beat.get("at") or now)),
                host=str(beat.get("host") or ""),
                inbox=beat.get("inbox") or None,
                inbox_state=str(beat.get("inbox_state") or "unset"),
            )
        )
    return sorted(found, key=lambda w: w.owner)


def live_workers_at(redis_url: str) -> list[LiveWorker] | None:
    """`live_workers` of the Redis at `redis_url`; None when it does not answer."""
    client = redis.Redis.from_url(redis_url, **REDIS_CLIENT_OPTIONS)
    try:
        return live_workers(client)
    except redis.RedisError:
        return None
    finally:
        client.close()


@dataclass(frozen=True)
class Reclaimed:
    document_id: int
    run_id: str
    owner: str | None
    """The dead owner it was taken from (None: a reclaim whose delivery never started it)."""


def reclaim(
    engine: Engine,
    client: redis.Redis,
    leases: Leases,
    send: Callable[[list[Reclaimed]], None],
    stale_s: float = STALE_AFTER_S,
) -> list[Reclaimed]:
    """Take back running documents whose lease ran out and whose owner is dead, and `send`
    them again; returns them. The caller's own leftovers (leases of its process that no thread
    works under) count as dead, and so do its own leases whose thread is stuck (its renewals
    stopped at the bound of a blocking call: `Leases.renewals`); the stuck thread's writes are
    refused from then on (the fence moved). So does a live owner's lease that ran out more
    than a lease ago: its heartbeat, which renews every third of a lease, neither renewed nor
    took it back (its reclaim failing, say), so it is not being worked on."""
    with session_scope(engine) as session:
        expired = reclaims.expired_leases(session, leases.scope, stale_s=stale_s, overdue_s=leases.lease_s)
    if not expired:
        return []
    others = {row[2] for row in expired if row[2] is not None and row[2] != leases.owner}
    alive = {owner for owner in others if client.exists(worker_key(owner))}
    taken: list[Reclaimed] = []
    for document_id, run_id, owner, fence, times_reclaimed, overdue in expired:
        if (owner in alive and not overdue) or (owner == leases.owner and leases.working(document_id)):
            continue
        with session_scope(engine) as session:
            if reclaims.reclaim_expired(
                session, document_id, owner, fence, redelivery_grace_s(leases.lease_s, times_reclaimed)
            ):
                taken.append(Reclaimed(document_id, run_id, owner))
    _send(taken, send)
    return taken


def reclaim_deliveries(
    engine: Engine, client: redis.Redis, leases: Leases, send: Callable[[list[Reclaimed]], None]
) -> list[Reclaimed]:
    """Take back the pending documents whose delivery an owner with no live heartbeat had
    received but never started, and `send` them again; returns them. One owner at a time: a
    set is out of Redis only while its documents are released in the database, and given back
    when that fails."""

    def alive(owner: str) -> bool:
        return bool(client.exists(worker_key(owner)))

    found: list[Reclaimed] = []
    for owner in deliveries.dead_owners(client, alive, leases.owner):
        received = deliveries.take(client, owner)
        try:
            with session_scope(engine) as session:
                pending = reclaims.reclaim_unstarted(
                    session, received, owner, grace_s=leases.lease_s, scope=leases.scope
                )
        except Exception:
            deliveries.give_back(client, owner, received)
            raise
        taken = [Reclaimed(document_id, run_id, owner) for document_id, run_id in pending]
        _send(taken, send)
        found += taken
    return found


def _send(taken: list[Reclaimed], send: Callable[[list[Reclaimed]], None]) -> None:
    for item in taken:
        log.warning(
            "reclaimed document %s of run %s from %s",
            item.document_id,
            item.run_id,
            item.owner or "a reclaim",
        )
    if taken:
        send(taken)


def redelivery_grace_s(lease_s: float, reclaims: int) -> float:
    """How long a reclaimed document's new delivery has to start it: a lease, doubled with each
    reclaim before. A delivery sent again waits behind the whole queue (a retry goes to its
    tail too), which can take far longer than a lease in a large run: without the doubling,
    every lease the document spent queued would send it once more. A delivery that was lost
    (with a broker's data) is still sent again, later each time."""
    return float(lease_s * 2 ** min(reclaims, RECLAIM_DOUBLINGS_MAX))


def finish_stranded(
    engine: Engine, client: redis.Redis, leases: Leases, finish: Callable[[str], None]
) -> list[str]:
    """`finish` (send a finalize for) each run whose documents are all final but whose report
    never came: one worker per run and lease period does it."""
    with session_scope(engine) as session:
        stranded = run_state.stranded_runs(session, quiet_s=leases.lease_s, scope=leases.scope)
    why = "every document is final but no report came: finalizing it"
    return _once_per_lease(client, leases, "stranded", stranded, finish, why)


def _once_per_lease(
    client: redis.Redis,
    leases: Leases,
    step: str,
    run_ids: list[str],
    send: Callable[[str], None],
    why: str,
) -> list[str]:
    """`send` each run, by the first worker to ask within a lease (the step lease
    `<step>:<run>`, left to run out); the runs this one sent."""
    sent = []
    for run_id in run_ids:
        if steps.once_per_lease(client, leases, f"{step}:{run_id}"):
            log.warning("run %s: %s", run_id, why)
            send(run_id)
            sent.append(run_id)
    return sent


def batch_chain(run_id: str) -> str:
    """The step lease of a batch run's chain of polls (`workers.run_tasks.batch_tick`), kept in
    the Redis of the deployment that polls it for a week after its last poll."""
    return f"batch-chain:{run_id}"


def restart_batch_polls(
    engine: Engine,
    client: redis.Redis,
    leases: Leases,
    poll: Callable[[str], None],
    quiet_s: float,
    stale_s: float = STALE_AFTER_S,
) -> list[str]:
    """`poll` (send the batch tick of) each batch run whose batches nobody polled for `quiet_s`:
    the chain of ticks was lost with a worker or a broker. One worker per run and lease does it.

    Only a run whose chain ran in this deployment (its chain's lease is in this Redis): a run is
    polled at the endpoint its batches went to, and a deployment on another endpoint that shares
    the database must not restart it against its own. A run quiet for `stale_s` is restarted
    whatever deployment polled it (its Redis lost the lease with its data); a tick sent to a
    worker whose endpoint does not hold the run's batches leaves them alone (`batching.tick`)."""
    with session_scope(engine) as session:
        quiet = batches.overdue_runs(session, quiet_s)
        stale = set(batches.overdue_runs(session, stale_s)) if quiet else set()
    if quiet:
        with client.pipeline(transaction=False) as pipe:
            for run_id in quiet:
                pipe.exists(steps.step_key(batch_chain(run_id)))
            here = pipe.execute()
        quiet = [run_id for run_id, found in zip(quiet, here, strict=True) if found or run_id in stale]
    why = f"nobody polled its batches for {quiet_s:.0f} s: polling them again"
    return _once_per_lease(client, leases, "batch-poll", quiet, poll, why)


class Heartbeat:
    """The process's heartbeat thread (daemon): `start()` once, `stop()` at shutdown."""

    def __init__(
        self,
        engine: Engine,
        client: redis.Redis,
        leases: Leases,
        send: Callable[[list[Reclaimed]], None],
        finish: Callable[[str], None],
        name: str = "",
        poll: Callable[[str], None] | None = None,
        poll_quiet_s: float = 0.0,
        published: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.engine, self.client, self.leases, self.name = engine, client, leases, name
        self.published = published
        """More to say in each beat (the nightly inbox this worker reads: `runs.inbox.InboxWatch`)."""
        self.send, self.finish, self.poll = send, finish, poll
        self.poll_quiet_s = max(poll_quiet_s, leases.lease_s)
        self.interval_s = leases.lease_s / 3
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pipeline-heartbeat", daemon=True)

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and say so at once (the process's leases are released by its tasks)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval_s + 5)
        with contextlib.suppress(redis.RedisError):
            deliveries.forget(self.client, self.leases.owner)  # the broker takes them back
            self.client.delete(worker_key(self.leases.owner))

    def beat(self) -> None:
        """One beat: its jobs in turn, each on its own: one that fails (Redis or the database
        down for a while, a bug) is logged, and the others still run; the next beat tries it
        again."""
        for name, job in self.jobs():
            try:
                job()
            except Exception as exc:
                log.warning("heartbeat: %s: %s: %s", name, type(exc).__name__, exc)

    def jobs(self) -> list[tuple[str, Callable[[], object]]]:
        """The beat's jobs, in order: alive in Redis, leases renewed, leftovers released, the
        dead's documents and deliveries taken back, stranded runs finished, batch polls restarted."""
        found: list[tuple[str, Callable[[], object]]] = [
            ("alive", self.announce),
            ("leases", self.renew),
            ("release", self.release_leftovers),
            ("reclaim", lambda: reclaim(self.engine, self.client, self.leases, self.send)),
            ("deliveries", lambda: reclaim_deliveries(self.engine, self.client, self.leases, self.send)),
            ("stranded runs", lambda: finish_stranded(self.engine, self.client, self.leases, self.finish)),
        ]
        if self.poll is not None:
            poll = self.poll
            found.append(
                (
                    "batch polls",
                    lambda: restart_batch_polls(
                        self.engine, self.client, self.leases, poll, self.poll_quiet_s
                    ),
                )
            )
        return found

    def announce(self) -> None:
        """`pipeline:worker:<owner>`: alive, what it holds and publishes; the deliveries its
        threads finished leave its received set; its step leases are renewed."""
        body = {
            "name": self.name,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "held": len(self.leases.held()),
            "at": redis_time(self.client),
        }
        try:
            body.update(self.published() if self.published else {})
        except Exception as exc:  # what it publishes besides is not worth its heartbeat
            log.warning("heartbeat: what it publishes: %s: %s", type(exc).__name__, exc)
        self.client.set(worker_key(self.leases.owner), json.dumps(body), px=self.leases.lease_ms)
        handled = self.leases.take_handled()
        try:
            deliveries.keep(self.client, self.leases.owner, handled)
        except redis.RedisError:
            self.leases.restore_handled(handled)
            raise
        steps.renew_held(self.client, self.leases)

    def renew(self) -> None:
        """The leases this process's threads work under, extended by one lease, or less: no
        further than the bound of a blocking call under way, and not at all past it (the
        thread is stuck: the lease runs out and `reclaim` takes it back). Decided on the
        database's clock."""
        with session_scope(self.engine) as session:
            by_length: dict[float, dict[int, int]] = {}
            for document_id, (fence, seconds) in self.leases.renewals(clock.now(session)).items():
                by_length.setdefault(seconds, {})[document_id] = fence
            for seconds, held in by_length.items():
                document_leases.renew_leases(session, held, seconds)

    def release_leftovers(self) -> None:
        """Leases a thread could not release (the database was down) are released now."""
        for document_id, fence in self.leases.unreleased().items():
            with session_scope(self.engine) as session:  # free now: reclaimed below
                document_leases.release_lease(session, document_id, fence, grace_s=0)
            self.leases.released(document_id)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()
