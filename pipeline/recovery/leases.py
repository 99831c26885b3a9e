"""The leases this worker process holds on documents (and on report steps), and its name as
their owner.

The process's heartbeat (`pipeline.recovery.heartbeat`) renews exactly these, so a lease outlives
its process by at most one lease period, and a document a thread stopped working on (whatever
the reason) is not renewed by mistake.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.core.constants import DEFAULT_LEASE_S


def process_name() -> str:
    """`host:pid:tag`: unique per process start, so a restarted worker never inherits leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Leases:
    def __init__(self, lease_s: float = DEFAULT_LEASE_S, owner: str | None = None, scope: str = "") -> None:
        self.lease_s = lease_s
        self.owner = owner or process_name()
        self.scope = scope
        """The deployment: every worker of one broker shares it (`pipeline.recovery.heartbeat.scope_of`)."""
        self._held: dict[int, int] = {}
        self._claimed: set[int] = set()
        self._steps: dict[str, str] = {}
        self._unreleased: dict[int, int] = {}
        self._handled: list[str] = []
        self._lock = threading.Lock()

    @property
    def lease_ms(self) -> int:
        return int(self.lease_s * 1000)

    @contextmanager
    def holding(self, document_id: int, fence: int) -> Iterator[None]:
        """While the block runs, the heartbeat renews lease `fence` on the document."""
        with self._lock:
            self._held[document_id] = fence
        try:
            yield
        finally:
            with self._lock:
                if self._held.get(document_id) == fence:
                    del self._held[document_id]

    @contextmanager
    def claiming(self, document_id: int) -> Iterator[bool]:
        """Whether this thread may start the document: False while another thread of the process
        starts or works on it (its delivery is a duplicate)."""
        with self._lock:
            mine = document_id not in self._claimed
            self._claimed.add(document_id)
        try:
            yield mine
        finally:
            if mine:
                with self._lock:
                    self._claimed.discard(document_id)

    def holds(self, document_id: int) -> bool:
        """A thread of this process starts or works on the document."""
        with self._lock:
            return document_id in self._held or document_id in self._claimed

    def held(self) -> dict[int, int]:
        """{document id: fence} of the leases the process's threads work under now."""
        with self._lock:
            return dict(self._held)

    def hold_step(self, key: str, token: str) -> None:
        """A step lease (`pipeline.recovery.heartbeat.StepLease`) the heartbeat renews from now on."""
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
