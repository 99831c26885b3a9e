"""The leases this worker process holds on documents (and on report steps), and its name as
their owner.

The process's heartbeat (`pipeline.recovery.heartbeat`) renews exactly these, so a lease outlives
its process by at most one lease period, and a document a thread stopped working on (whatever
the reason) is not renewed by mistake.

Liveness comes from progress, not from the process being alive: the work under a lease tells
each blocking call it makes (`pipeline.core.progress.blocking`), and a lease is renewed only
while none has run past its bound: the call's own (`within_s`: a model call's HTTP timeout, a
limiter's sleep; 0 for a round trip to Redis) plus one lease. So a call to the model within its
timeout, or a limiter wait whose Redis keeps answering, keeps the lease; a thread blocked past
the bound loses it (within one beat of the bound: a renewal never reaches past it), its document
is taken back and sent again, and the fence refuses what the thread writes should it wake.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from itertools import count

from pipeline.core import progress
from pipeline.core.settings import default


def process_name() -> str:
    """`host:pid:tag`: unique per process start, so a restarted worker never inherits leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class _Call:
    """A blocking call under way in a lease's work."""

    within_s: float
    seen_at: datetime | None = None
    """When a beat first saw it, on the database's clock (the one clock of lease decisions)."""


class _Watch:
    """The progress watcher (`pipeline.core.progress.Watcher`) of one lease."""

    def __init__(self, leases: Leases, lease: tuple[int, int]) -> None:
        self.leases, self.lease = leases, lease

    def began(self, within_s: float) -> int:
        return self.leases._began(self.lease, within_s)

    def ended(self, mark: int) -> None:
        self.leases._ended(self.lease, mark)


class Leases:
    def __init__(
        self, lease_s: float = default("lease_s"), owner: str | None = None, scope: str = ""
    ) -> None:
        self.lease_s = lease_s
        self.owner = owner or process_name()
        self.scope = scope
        """The deployment: every worker of one broker shares it (`pipeline.recovery.heartbeat.scope_of`)."""
        self._held: dict[int, int] = {}
        self._claimed: dict[int, int] = {}
        """{document id: threads that claimed it}"""
        self._calls: dict[tuple[int, int], dict[int, _Call]] = {}
        """{(document id, fence): {mark: blocking call under way}}"""
        self._marks = count()
        self._stuck: set[int] = set()
        """Documents whose lease's work was stuck at the last `renewals`."""
        self._steps: dict[str, str] = {}
        self._unreleased: dict[int, int] = {}
        self._handled: list[str] = []
        self._lock = threading.Lock()

    @property
    def lease_ms(self) -> int:
        return int(self.lease_s * 1000)

    @contextmanager
    def holding(self, document_id: int, fence: int) -> Iterator[None]:
        """While the block runs, the heartbeat renews lease `fence` on the document, as long as
        the blocking calls of the block (and of the pool tasks it hands its context to) make
        progress (see the module's docstring)."""
        lease = (document_id, fence)
        with self._lock:
            self._held[document_id] = fence
            self._calls[lease] = {}
        try:
            with progress.watched_by(_Watch(self, lease)):
                yield
        finally:
            with self._lock:
                self._calls.pop(lease, None)
                if self._held.get(document_id) == fence:
                    del self._held[document_id]

    @contextmanager
    def claiming(self, document_id: int) -> Iterator[bool]:
        """Whether this thread may start the document: False while another thread of the process
        starts or works on it (its delivery is a duplicate), unless that thread is stuck (its
        lease is being taken back, and this delivery is the one sent again)."""
        with self._lock:
            mine = document_id not in self._claimed or document_id in self._stuck
            if mine:
                self._claimed[document_id] = self._claimed.get(document_id, 0) + 1
                self._stuck.discard(document_id)  # one delivery takes the stuck thread's place
        try:
            yield mine
        finally:
            if mine:
                with self._lock:
                    left = self._claimed.pop(document_id) - 1
                    if left:
                        self._claimed[document_id] = left

    def holds(self, document_id: int) -> bool:
        """A thread of this process starts or works on the document."""
        with self._lock:
            return document_id in self._held or document_id in self._claimed

    def working(self, document_id: int) -> bool:
        """A thread of this process starts or works on the document, and was not stuck at the
        last `renewals`."""
        with self._lock:
            held = document_id in self._held or document_id in self._claimed
            return held and document_id not in self._stuck

    def renewals(self, now: datetime) -> dict[int, tuple[int, float]]:
        """{document id: (fence, seconds)}: how far past `now` (the database's clock) the
        heartbeat extends each lease the process's threads work under. A full lease, unless a
        blocking call of the lease's work is under way: then no further than that call's bound
        (its `within_s` plus one lease, from the beat that first saw it), and not at all once
        past it. Such a lease is left out: its thread is stuck, the lease runs out, and
        `reclaim` takes the document back."""
        found: dict[int, tuple[int, float]] = {}
        with self._lock:
            self._stuck = set()
            for document_id, fence in self._held.items():
                seconds = self.lease_s
                for call in self._calls.get((document_id, fence), {}).values():
                    call.seen_at = call.seen_at or now
                    bound_s = call.within_s + self.lease_s
                    seconds = min(seconds, bound_s - (now - call.seen_at).total_seconds())
                if seconds > 0:
                    found[document_id] = (fence, seconds)
                else:
                    self._stuck.add(document_id)
        return found

    def _began(self, lease: tuple[int, int], within_s: float) -> int:
        with self._lock:
            mark = next(self._marks)
            calls = self._calls.get(lease)
            if calls is not None:  # a call after its lease's block ended is nobody's
                calls[mark] = _Call(within_s)
        return mark

    def _ended(self, lease: tuple[int, int], mark: int) -> None:
        with self._lock:
            self._calls.get(lease, {}).pop(mark, None)

    def held(self) -> dict[int, int]:
        """{document id: fence} of the leases the process's threads work under now."""
        with self._lock:
            return dict(self._held)

    def hold_step(self, key: str, token: str) -> None:
        """A step lease (`pipeline.recovery.steps.StepLease`) the heartbeat renews from now on."""
        with self._lock:
            self._steps[key] = token

    def drop_step(self, key: str) -> None:
        with self._lock:
            self._steps.pop(key, None)

    def held_steps(self) -> dict[str, str]:
        with self._lock:
            return dict(self._steps)

    def release_later(self, document_id: int, fence: int) -> None:
        """A lease its thread could not release (the database was down): the heartbeat releases
        it once it can, so that the document need not wait for the lease to run out."""
        with self._lock:
            self._unreleased[document_id] = fence

    def unreleased(self) -> dict[int, int]:
        with self._lock:
            return dict(self._unreleased)

    def released(self, document_id: int) -> None:
        with self._lock:
            self._unreleased.pop(document_id, None)

    def handled(self, delivery: str) -> None:
        """A delivery this process received is done with (its task ended: the document is
        leased, final, or handed back for a retry): the next beat drops it from the process's
        received set (`pipeline.recovery.deliveries`)."""
        with self._lock:
            self._handled.append(delivery)

    def take_handled(self) -> list[str]:
        with self._lock:
            found, self._handled = self._handled, []
        return found

    def restore_handled(self, handled: list[str]) -> None:
        """Deliveries `take_handled` gave that the beat could not drop: the next beat tries again."""
        with self._lock:
            self._handled[:0] = handled
