"""One active beat per schedule: `pipeline beat` fires only while it holds the schedule's step
lease (`beat:<schedule>`, `pipeline.recovery.steps`), renewed at every tick of its scheduler.

A second beat for the same schedule finds the lease held, says who holds it and since when, and
waits as a standby: it asks again at every tick and takes the lease once its holder stopped
renewing it (killed, or paused past the lease). A holder that finds its lease gone (it was paused
longer than the lease, and the standby took over) says so and stops firing: it checks the lease
before every message it sends (the fence), so a beat woken from a pause sends nothing the new
holder sends as well. Expiry is Redis's (the key's TTL), never a host's clock.

A schedule is what a beat fires: the nightly submit of its inbox (so the inbox names it), or,
without an inbox, only the deployment's chores (the watchdog, the prune) on its broker.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis

from pipeline.recovery.leases import Leases
from pipeline.recovery.steps import StepLease, step_key

log = logging.getLogger(__name__)

RENEWALS_PER_LEASE = 3
"""The holder renews its lease every third of it, as the worker heartbeat renews theirs."""


def schedule_name(inbox: str | None) -> str:
    """The lease's name for a beat of `inbox` (None: a beat of the deployment's chores only)."""
    return f"beat:{os.path.normpath(inbox) if inbox else '-'}"


@dataclass(frozen=True)
class Holder:
    """Who holds a schedule's lease, read from its token (`host|pid|since|tag`)."""

    host: str
    pid: str
    since: datetime

    @classmethod
    def of(cls, token: str) -> Holder | None:
        parts = token.split("|")
        if len(parts) != 4:
            return None
        try:
            since = datetime.fromtimestamp(float(parts[2]), UTC)
        except ValueError:
            return None
        return cls(parts[0], parts[1], since)

    def __str__(self) -> str:
        return f"{self.host}, pid {self.pid}"


class ScheduleLease:
    """The lease a beat fires under. `hold()` at each tick (take, renew, or stand by: True while
    this beat may fire); `still_held()` before each message (the fence); `release()` at exit."""

    def __init__(self, client: redis.Redis, inbox: str | None, lease_s: float, what: str) -> None:
        self.client = client
        self.name = schedule_name(inbox)
        self.lease_s = lease_s
        self.what = what
        """The schedule in words, for the log: "inbox /data/inbox", or the broker's."""
        self._leases = Leases(lease_s=lease_s)
        self._step: StepLease | None = None
        self._standby_behind: str | None = None
        """The token of the holder this beat last said it waits behind (said once per holder)."""

    @property
    def renew_every_s(self) -> float:
        return self.lease_s / RENEWALS_PER_LEASE

    @property
    def active(self) -> bool:
        return self._step is not None

    def hold(self) -> bool:
        """Whether this beat holds the schedule now: its lease renewed, or taken when free."""
        if self._step is not None:
            if self._step.take():  # its own: renewed (or taken again, if nobody took it meanwhile)
                return True
            self._lost()
            return False
        step = StepLease(self.client, self._leases, self.name, token=self._token())
        if not step.take():
            self._standing_by()
            return False
        self._step = step
        if self._standby_behind is None:
            log.info(
                "this beat holds the schedule for %s (lease %.0f s, renewed every %.0f s)",
                self.what,
                self.lease_s,
                self.renew_every_s,
            )
        else:
            before = Holder.of(self._standby_behind)
            log.warning(
                "this beat takes over the schedule for %s: the beat on %s stopped renewing its lease",
                self.what,
                before or "another host",
            )
        self._standby_behind = None
        return True

    def still_held(self) -> bool:
        """The fence, before a message is sent: this beat's token is still the lease's."""
        if self._step is None:
            return False
        if self._holder_token() == self._step.token:
            return True
        self._lost()
        return False

    def release(self) -> None:
        """At exit: the lease is free at once, for a standby to take at its next look."""
        if self._step is not None:
            self._step.release()
            self._step = None

    def _token(self) -> str:
        now: Any = self.client.time()  # Redis's clock, as the lease's expiry is
        seconds, micros = now
        return f"{socket.gethostname()}|{os.getpid()}|{seconds + micros / 1e6:.3f}|{uuid.uuid4().hex[:6]}"

    def _holder_token(self) -> str | None:
        found: Any = self.client.get(step_key(self.name))
        return found.decode() if isinstance(found, bytes) else found

    def _standing_by(self) -> None:
        token = self._holder_token()
        if token is None or token == self._standby_behind:
            return
        self._standby_behind = token
        holder = Holder.of(token)
        since = f" since {holder.since:%Y-%m-%d %H:%M:%S} UTC" if holder else ""
        log.warning(
            "another beat (%s) holds the schedule for %s%s; this one waits as a standby and takes "
            "over within %.0f s if that one stops",
            holder or token,
            self.what,
            since,
            self.lease_s + self.renew_every_s,
        )

    def _lost(self) -> None:
        self._step = None
        token = self._holder_token()
        holder = Holder.of(token) if token else None
        now = f"{holder} holds it now" if holder else "nobody holds it now"
        log.warning(
            "this beat lost the schedule for %s: its lease was not renewed for %.0f s (the process "
            "was paused or cut off from Redis) and %s; it stops firing and waits as a standby",
            self.what,
            self.lease_s,
            now,
        )
        self._standby_behind = token
