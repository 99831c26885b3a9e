"""How work under a lease tells its process's heartbeat that it is not stuck.

A thread working under a document's lease brackets each blocking call it makes with
`blocking(within_s)`: a call to the model (`within_s` is its HTTP timeout), a round trip to the
limiter's Redis (0: it answers in milliseconds), a limiter's sleep (its length). The watcher of
the lease (`pipeline.recovery.leases`) has the heartbeat renew the lease only while no such call
has run past its bound, so a thread blocked for good (a half-open connection, a peer that never
answers) loses its lease to a live worker instead of keeping it for as long as its process beats.

The call ending is the progress: an answer, a grant, a refusal or an error. Code outside any lease
(finalize, the CLI) has no watcher, and `blocking` does nothing there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class Watcher(Protocol):
    """What `blocking` tells: a blocking call began (with its own bound), and it ended."""

    def began(self, within_s: float) -> int:
        """A call began that ends, by its own measure, within `within_s`; returns its mark."""
        ...

    def ended(self, mark: int) -> None: ...


_watcher: ContextVar[Watcher | None] = ContextVar("pipeline_progress_watcher", default=None)


@contextmanager
def watched_by(watcher: Watcher) -> Iterator[None]:
    """While the block runs, the blocking calls of this thread (and of the tasks it hands to a
    pool with `contextvars.copy_context()`) are told to `watcher`."""
    token = _watcher.set(watcher)
    try:
        yield
    finally:
        _watcher.reset(token)


@contextmanager
def blocking(within_s: float = 0.0) -> Iterator[None]:
    """The block is one blocking call that ends within `within_s` by its own measure."""
    watcher = _watcher.get()
    if watcher is None:
        yield
        return
    mark = watcher.began(within_s)
    try:
        yield
    finally:
        watcher.ended(mark)
