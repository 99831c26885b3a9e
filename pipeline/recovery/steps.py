"""Step leases: the one lock of the pipeline's steps that are not a document's (those are leases
in the database: `pipeline.storage.document_leases`).

A step lease is a Redis key, `pipeline:step:<name>` (`pipeline.core.keys.STEP`), holding its holder's token and expiring on
Redis's clock. It is fenced (`check` before a write: a holder whose lease ran out, or was taken
over, writes nothing) and renewable (`renew`; the process's heartbeat renews those entered with
`with`). It serves:

- the report steps: a run's synthesis, a document's compression, a partial synthesis (`with`:
  held while the step runs, renewed by the heartbeat, released at its end);
- once-per-lease chores: a run's report sent by one finalize, a stranded run finished or a batch
  poll restarted by one heartbeat (`take` and let it run out: nobody else does it within a lease);
- a run's one finalize poller and its one batch chain (the task's id or the chain's id is the
  token: the holder takes it again at each poll, `take_over` starts a new chain).
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import redis

from pipeline.core import keys
from pipeline.core.errors import LeaseLost
from pipeline.recovery.leases import Leases

_TAKE = (
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end "
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end "
    "return 0"
)
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def step_key(name: str) -> str:
    return keys.STEP.of(name)


def step_held(client: redis.Redis, name: str) -> bool:
    """Whether some live holder has the step lease `name`."""
    return bool(client.exists(step_key(name)))


class StepLease:
    """A lease on the step `name`, for one lease period of `leases` (or `ttl_s`), by `token`
    (by default one of its own, naming the process).

        with StepLease(client, leases, f"synthesize:{run_id}") as step:
            if step.taken: ... step.check() before each write ...
    """

    def __init__(
        self,
        client: redis.Redis,
        leases: Leases,
        name: str,
        *,
        token: str | None = None,
        ttl_s: float | None = None,
    ) -> None:
        self.client, self.leases = client, leases
        self.key = step_key(name)
        self.token = token or f"{leases.owner}:{uuid.uuid4().hex[:8]}"
        self.ttl_ms = int((leases.lease_s if ttl_s is None else ttl_s) * 1000)
        self.taken = False

    def take(self) -> bool:
        """Take the lease if it is free, or keep it if this token holds it already."""
        self.taken = bool(self.client.eval(_TAKE, 1, self.key, self.token, self.ttl_ms))
        return self.taken

    def take_over(self) -> None:
        """Take the lease whoever holds it: their next `take` or `check` fails."""
        self.client.set(self.key, self.token, px=self.ttl_ms)
        self.taken = True

    def renew(self) -> bool:
        """Extend the lease by its period, if this token still holds it."""
        return bool(self.client.eval(_RENEW, 1, self.key, self.token, self.ttl_ms))

    def release(self) -> None:
        if self.taken:
            self.taken = False
            with contextlib.suppress(redis.RedisError):
                self.client.eval(_RELEASE, 1, self.key, self.token)

    def check(self) -> None:
        """Raises LeaseLost unless this token still holds the lease."""
        found: Any = self.client.get(self.key)
        held = found.decode() if isinstance(found, bytes) else found
        if held != self.token:
            raise LeaseLost(f"{self.key} is no longer held by {self.token} (now {held or 'nobody'})")

    def __enter__(self) -> StepLease:
        if self.take():
            self.leases.hold_step(self.key, self.token)
        return self

    def __exit__(self, *_: object) -> None:
        if self.taken:
            self.leases.drop_step(self.key)
        self.release()


def renew_held(client: redis.Redis, leases: Leases) -> None:
    """The heartbeat's part: the step leases the process's threads are inside, renewed."""
    for key, token in leases.held_steps().items():
        client.eval(_RENEW, 1, key, token, leases.lease_ms)


def once_per_lease(client: redis.Redis, leases: Leases, name: str) -> bool:
    """True for the first caller, of every worker, to ask for `name` within a lease."""
    return StepLease(client, leases, name).take()


def forget(client: redis.Redis, name: str) -> None:
    """A once-per-lease chore to be done again at once: `pipeline retry` drops a run's report,
    and the finalize of the retried documents must send the new one without waiting for the
    lease of the one before (`report:<run>`) to run out."""
    client.delete(step_key(name))
