"""The nightly inbox as the workers see it.

`pipeline beat` sends its PIPELINE_INBOX with every nightly task, and a worker of the report
queue reads it: the path must exist there. Each worker's heartbeat publishes the inbox it is
configured with and whether that host can read it (`inbox_state`); beat refuses to start when
live workers publish and none of them reads beat's inbox, and `pipeline status` flags the same
mismatch. The worker that takes the nightly task checks the path once more (`inbox_problem`).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pipeline.ingest.inputs import fixed_part

if TYPE_CHECKING:
    from pipeline.recovery.heartbeat import LiveWorker

InboxState = Literal["unset", "missing", "unreadable", "readable"]
READABLE: InboxState = "readable"


def inbox_state(inbox: str | None) -> InboxState:
    """Whether this host can read `inbox` (a directory, a file or a glob): "unset" when none is
    configured, "missing" when its directory does not exist here, "unreadable" when this
    process may not list or read it."""
    if not inbox:
        return "unset"
    base = Path(fixed_part(inbox))
    if not base.exists():
        return "missing"
    wanted = os.R_OK | os.X_OK if base.is_dir() else os.R_OK
    return READABLE if os.access(base, wanted) else "unreadable"


INBOX_CHECK_S = 60.0
"""How often a heartbeat looks at its inbox again (a stat of the path): a mount that comes or
goes shows within a minute, and a hung network mount does not stall every beat."""


class InboxWatch:
    """What a worker's heartbeat publishes of its nightly inbox: the path and whether this host
    reads it, looked at again at most every INBOX_CHECK_S."""

    def __init__(self, inbox: str | None) -> None:
        self.inbox, self._state, self._checked = inbox, inbox_state(None), -INBOX_CHECK_S

    def __call__(self) -> dict[str, str | None]:
        now = time.monotonic()
        if now - self._checked >= INBOX_CHECK_S:
            self._state, self._checked = inbox_state(self.inbox), now
        return {"inbox": self.inbox, "inbox_state": self._state}


def same_inbox(a: str | None, b: str | None) -> bool:
    """Whether two spellings name the same inbox ("/data/inbox/" and "/data/inbox")."""
    return bool(a and b) and os.path.normpath(str(a)) == os.path.normpath(str(b))


def reads(worker: LiveWorker, inbox: str) -> bool:
    """Whether the worker's last heartbeat said it reads `inbox`."""
    return worker.inbox_state == READABLE and same_inbox(worker.inbox, inbox)


@dataclass(frozen=True)
class InboxCheck:
    verdict: Literal["ok", "warn", "refuse"]
    """"refuse": live workers publish an inbox and none reads this one (beat exits 2)."""
    message: str


def check_inbox(inbox: str, workers: Sequence[LiveWorker] | None) -> InboxCheck:
    """Compare the inbox configured here with what the live workers publish (None: their
    heartbeats could not be read)."""
    if workers is None:
        return InboxCheck(
            "warn", f"PIPELINE_INBOX={inbox}: the workers' heartbeats could not be read, so it is not checked"
        )
    if not workers:
        return InboxCheck(
            "warn",
            f"PIPELINE_INBOX={inbox}: no live worker yet to check that it can read it; "
            "a worker that cannot will fail the nightly run loudly (ERROR in its log)",
        )
    readers = [w for w in workers if reads(w, inbox)]
    if not readers:
        return InboxCheck(
            "refuse",
            f"PIPELINE_INBOX={inbox} is set here but no live worker can read it "
            f"(workers see: {workers_see(workers)}): mount it on the workers or set PIPELINE_INBOX there",
        )
    others = [w for w in workers if not reads(w, inbox)]
    if others:
        return InboxCheck(
            "warn",
            f"PIPELINE_INBOX={inbox}: {len(others)} of {len(workers)} live workers cannot read it "
            f"(they see: {workers_see(others)}); the nightly run fails on whichever of them takes it: "
            "mount it on them or set PIPELINE_INBOX there",
        )
    return InboxCheck("ok", f"PIPELINE_INBOX={inbox}: all {len(workers)} live workers read it")


def workers_see(workers: Sequence[LiveWorker]) -> str:
    """What the workers publish, grouped: "/data/inbox (missing) on host-b; no PIPELINE_INBOX on
    host-a (2 workers)"."""
    groups = Counter(
        (w.inbox if w.inbox_state != "unset" else None, w.inbox_state, w.host or "an unknown host")
        for w in workers
    )
    parts = []
    for (inbox, state, host), count in sorted(groups.items(), key=lambda g: (str(g[0][0]), g[0][2])):
        seen = "no PIPELINE_INBOX" if inbox is None else f"{inbox} ({state})"
        parts.append(f"{seen} on {host}" + (f" ({count} workers)" if count > 1 else ""))
    return "; ".join(parts)


def inbox_problem(inbox: str | None, host: str) -> str | None:
    """Why the worker on `host` cannot submit the nightly `inbox` (beat's, or its own
    PIPELINE_INBOX when beat sent none), in one sentence with the fix; None when it can."""
    state = inbox_state(inbox)
    if state == READABLE:
        return None
    if inbox is None or state == "unset":
        return (
            f"nightly run not started on worker host {host}: beat sent no inbox and PIPELINE_INBOX "
            "is not set here: set PIPELINE_INBOX where `pipeline beat` runs and restart it"
        )
    why = "does not exist" if state == "missing" else "cannot be read by this worker"
    return (
        f"nightly run not started: the inbox {inbox} {why} on worker host {host}: "
        "mount it on the workers at the same path, or set PIPELINE_INBOX where `pipeline beat` runs "
        "to the path the workers see"
    )
