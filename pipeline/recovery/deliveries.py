"""Deliveries a worker process received but may not have started, kept in Redis, so that a live
worker sends again those of a process that died before it leased their documents.

A document's lease is taken when its task starts. Between the broker handing the message to a
worker and that moment (a fraction of a second, or a retry's whole countdown) the document is
only `pending`: no lease names its holder, so the heartbeat's reclaim cannot see it, and a worker
killed then leaves the message unacknowledged until the broker's visibility timeout (hours),
with the run's report waiting on it. So the process that receives a message notes its delivery
(`note_received`, one SADD), and once its task has ended the heartbeat of the process
that ran it drops it (`keep`) from the receiver's set. The two differ under a prefork pool: the
parent receives, a child runs, and the receiver's name travels on the request
(`RECEIVER_FIELD`), so the parent's set holds only the deliveries not yet handled.

Keys:
- `pipeline:received:<owner>`: a set of `<document id>:<task id>:<retries>`, one per delivery;
  it expires `RECEIVED_TTL_S` after the owner's last beat.
- `pipeline:receivers`: the owners that may have such a set; a live worker takes the set of one
  whose heartbeat key is gone (`take`: MULTI, so one worker takes each).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import redis

from pipeline.core import keys

RECEIVED_PREFIX = keys.RECEIVED.prefix
RECEIVERS_KEY = keys.RECEIVERS.prefix
RECEIVED_TTL_S = 86_400
"""A dead owner's set outlives it by a day at most (a deployment with no live worker for a day
leaves the messages to the broker's visibility timeout)."""
RECEIVER_FIELD = "pipeline_receiver"
"""The request field (a message header) naming the owner whose set noted the delivery."""


def received_key(owner: str) -> str:
    return f"{RECEIVED_PREFIX}{owner}"


def delivery(document_id: int, task_id: str, retries: int) -> str:
    """One delivery's member: a retry keeps its task's id, so its count tells the two apart."""
    return f"{document_id}:{task_id}:{retries}"


def handled(receiver: str, document_id: int, task_id: str, retries: int) -> str:
    """What `Leases.handled` is given once a delivery's task ended: the delivery, and the owner
    whose set noted it (under prefork, the parent: not the child that ran the task)."""
    return f"{receiver} {delivery(document_id, task_id, retries)}"


def note_received(client: redis.Redis, owner: str, document_id: int, task_id: str, retries: int) -> None:
    """`owner` received a delivery of the document (called as the message arrives)."""
    client.sadd(received_key(owner), delivery(document_id, task_id, retries))


def keep(client: redis.Redis, owner: str, done: list[str]) -> None:
    """At each beat of `owner`: its set lives on, and the deliveries its threads are `done`
    with (`Leases.handled`, each from `handled`; a bare delivery is the owner's own) leave the
    sets that noted them."""
    noted: dict[str, list[str]] = {}
    for entry in done:
        receiver, _, member = entry.rpartition(" ")
        noted.setdefault(receiver or owner, []).append(member)
    with client.pipeline(transaction=False) as pipe:
        pipe.sadd(RECEIVERS_KEY, owner)
        for receiver, members in noted.items():
            pipe.srem(received_key(receiver), *members)
        pipe.expire(received_key(owner), RECEIVED_TTL_S)
        pipe.execute()


def forget(client: redis.Redis, owner: str) -> None:
    """A worker stopping on its own: the broker takes back what it had not started."""
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(received_key(owner))
        pipe.srem(RECEIVERS_KEY, owner)
        pipe.execute()


def dead_owners(client: redis.Redis, alive: Callable[[str], bool], me: str) -> list[str]:
    """The owners with a received set whose heartbeat is gone."""
    owners = (_text(raw) for raw in client.smembers(RECEIVERS_KEY))  # type: ignore[union-attr]
    return [owner for owner in owners if owner != me and not alive(owner)]


def take(client: redis.Redis, owner: str) -> set[int]:
    """The documents `owner` received, removed from Redis: of every caller, one gets them."""
    with client.pipeline(transaction=True) as pipe:
        pipe.smembers(received_key(owner))
        pipe.delete(received_key(owner))
        pipe.srem(RECEIVERS_KEY, owner)
        members, _, _ = pipe.execute()
    return {int(_text(member).split(":", 1)[0]) for member in members}


def give_back(client: redis.Redis, owner: str, document_ids: Iterable[int]) -> None:
    """Put a taken set back (the database could not be asked): a later beat takes it again."""
    members = [delivery(document_id, "given-back", 0) for document_id in document_ids]
    with client.pipeline(transaction=True) as pipe:
        if members:
            pipe.sadd(received_key(owner), *members)
            pipe.expire(received_key(owner), RECEIVED_TTL_S)
        pipe.sadd(RECEIVERS_KEY, owner)
        pipe.execute()


def _text(member: bytes | str) -> str:
    return member.decode() if isinstance(member, bytes) else member
