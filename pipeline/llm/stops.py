"""Stopping a cancelled run's calls: the flag `pipeline cancel` sets, and the check the LLM
client makes right before each request goes out.

`pipeline cancel` marks the run and its unfinished documents `cancelled` in the database (the
record), then sets the run's flag here, in Redis next to the limiter's keys. Work done for a
run (a document's extraction, a compression, a synthesis, a batch poll) runs under
`checked_by(check)`, which the chunk pool's threads inherit with the copied context; the client
calls `before_call()` once the limiter has admitted a call and before it is sent, so a call that
was waiting its turn when the run was cancelled is never sent. The check is one GET.

The database has the last word: a flag found while the run is not cancelled there is stale (a
cancel that set it after a `pipeline retry` had taken the run back) and is removed, so a late
flag never stops a retried run's work (`check_of(run_id, confirm)`).

Without Redis, or once Redis lost the flag, the database stops the work instead: a cancelled
document is final, so no delivery starts it again and its holder's next write is refused; at
most the calls already begun are spent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from pipeline.core import keys, progress
from pipeline.core.errors import RunCancelled

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)
STOP_TTL_S = 7 * 24 * 3600
"""How long a run's flag lives: past any delivery or batch (24 h window) still under way for it."""
REASON_CHARS = 500

Check = Callable[[], None]
"""Raises RunCancelled when the work's run was cancelled."""


def flag_key(run_id: str) -> str:
    return keys.CANCELLED.of(run_id)


class StopFlags:
    """The runs' cancel flags in one Redis (the limiter's)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def stop(self, run_id: str, reason: str) -> None:
        """From now on, no call of the run goes out (`check` raises with `reason`)."""
        self.client.set(flag_key(run_id), reason[:REASON_CHARS], ex=STOP_TTL_S)

    def clear(self, run_id: str) -> None:
        """The run may call again (`pipeline retry`)."""
        self.client.delete(flag_key(run_id))

    def reason(self, run_id: str) -> str | None:
        """Why the run was cancelled; None when it was not, or when Redis does not answer (the
        database stops a cancelled run's work then: a check that raised would have the
        delivery retried while it holds its document, and a silent Redis would keep it)."""
        import redis

        try:
            with progress.blocking():  # a round trip to Redis, told to the lease's watcher
                found: Any = self.client.get(flag_key(run_id))
        except redis.RedisError as exc:
            log.warning("cannot read run %s's cancel flag (%s): going on", run_id, type(exc).__name__)
            return None
        if found is None:
            return None
        return found.decode() if isinstance(found, bytes) else str(found)

    def check(self, run_id: str, confirm: Callable[[], bool] | None = None) -> None:
        """Raise RunCancelled when the run's flag is set, and `confirm()` (the database: is the
        run cancelled?) agrees; a flag it does not confirm is stale, and removed."""
        reason = self.reason(run_id)
        if reason is None:
            return
        if confirm is not None and not confirm():
            log.warning("run %s is not cancelled in the database: its late cancel flag is removed", run_id)
            self.clear(run_id)
            return
        raise RunCancelled(reason)

    def check_of(self, run_id: str, confirm: Callable[[], bool] | None = None) -> Check:
        return lambda: self.check(run_id, confirm)


_check: ContextVar[Check | None] = ContextVar("pipeline_stop_check", default=None)


@contextmanager
def checked_by(check: Check | None) -> Iterator[None]:
    """While the block runs, every call this thread (and the pool tasks it hands its context
    to) makes is checked first; None: nothing to check (no Redis)."""
    if check is None:
        yield
        return
    token = _check.set(check)
    try:
        yield
    finally:
        _check.reset(token)


def before_call() -> None:
    """The client's part, right before a request is sent: raises RunCancelled when the run
    the call is made for was cancelled. Nothing outside `checked_by`."""
    check = _check.get()
    if check is not None:
        check()
