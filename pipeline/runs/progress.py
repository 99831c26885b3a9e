"""Waiting for a run to end: progress that tells the truth, and the stuck states that end the wait.

Motion is what brings the run nearer its report: documents extracted, chunks answered, calls that
brought an answer. Failed calls are counted apart, never as motion. While nothing moves, the wait
names why (`judge`): no live worker, every call failing, the limiter waiting on a provider's
pause. A state that held for PIPELINE_WAIT_STUCK_S without motion ends the wait (`WaitStuck`,
exit 4); the run itself is not touched and goes on.

On a terminal a bar shows documents and chunks; elsewhere (cron, CI logs) a plain line is printed
every PIPELINE_PROGRESS_INTERVAL_S seconds and at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.core.settings import Settings
from pipeline.runs.status import (
    CallOutcomes,
    RunStatusView,
    call_outcomes,
    longest_pause_s,
    run_status,
    worker_views,
)
from pipeline.storage.models import RunStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine

FINAL_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STALLED, RunStatus.CANCELLED)
POLL_S = 0.5
REPORTING_POLL_S = 0.1
"""Once every document is final, the report is seconds away: the end is seen sooner."""
PROBE_S = 2.0
"""How often Redis is asked for live workers and pauses (at most; a small stuck bound asks more)."""
NOTICE_S = 10.0
"""A stuck state is named once it held this long (at most half the bound): a worker starting up,
a failed call retried with success, are not worth a line."""
ERROR_CHARS = 160

NO_WORKER = "no live worker"
CALLS_FAILING = "every call failing"
PAUSED = "limiter paused"


class WaitAborted(RuntimeError):
    pass


class WaitStuck(WaitAborted):
    """The run did not move for the stuck bound, for a named reason; it goes on regardless."""

    def __init__(self, stuck: Stuck) -> None:
        super().__init__(stuck.message)
        self.stuck = stuck


@dataclass(frozen=True)
class Snapshot:
    """What one poll saw of a run, with the moment (monotonic seconds) it saw it."""

    at: float
    documents_done: int = 0
    documents_failed: int = 0
    chunks_done: int = 0
    calls_ok: int = 0
    calls_failed: int = 0
    live_workers: int | None = None
    """Workers with a live heartbeat; None: Redis was not asked or did not answer."""
    paused_for_s: float | None = None
    """The longest provider pause the limiter holds; None: not known."""
    last_error: str | None = None

    def motion(self) -> tuple[int, int, int]:
        return (self.documents_done - self.documents_failed, self.chunks_done, self.calls_ok)


@dataclass(frozen=True)
class Track:
    """What the successive snapshots add up to: when the run last moved, and since when each
    stuck condition holds. `advance` folds a snapshot in; `judge` reads it."""

    last: Snapshot | None = None
    moved_at: float = 0.0
    failed_at_motion: int = 0
    no_worker_since: float | None = None
    failing_since: float | None = None
    paused_since: float | None = None


@dataclass(frozen=True)
class Stuck:
    name: str
    message: str
    """One sentence: what holds, for how long, and what to do."""
    held_s: float
    gives_up: bool
    """It held for the bound without motion: the wait ends (exit 4)."""


def advance(track: Track, snap: Snapshot) -> Track:
    """`track` with one more snapshot."""
    last = track.last
    if last is None or any(n > b for n, b in zip(snap.motion(), last.motion(), strict=True)):
        track = replace(track, moved_at=snap.at, failed_at_motion=snap.calls_failed, failing_since=None)
    elif track.failing_since is None and snap.calls_failed > track.failed_at_motion:
        track = replace(track, failing_since=snap.at)
    return replace(
        track,
        last=snap,
        no_worker_since=_since(track.no_worker_since, snap.at, snap.live_workers, lambda n: n == 0),
        paused_since=_since(track.paused_since, snap.at, snap.paused_for_s, lambda s: s > 0),
    )


def _since(
    since: float | None, at: float, value: float | None, holds: Callable[[float], bool]
) -> float | None:
    """When a condition began: kept while it holds, `at` when it starts, None once it stops (an
    unknown value changes nothing)."""
    if value is None:
        return since
    if not holds(value):
        return None
    return at if since is None else since


def judge(track: Track, now: float, bound_s: float) -> Stuck | None:
    """The stuck state the run is in at `now`, if any; it gives up once it held for `bound_s`
    without motion. A provider pause counts only when longer than the bound: a shorter one ends
    before it could."""
    snap = track.last
    if snap is None:
        return None
    notice = min(NOTICE_S, bound_s / 2)

    def held(since: float | None) -> float | None:
        if since is None:
            return None
        found = now - max(since, track.moved_at)
        return found if found >= notice else None

    if (for_s := held(track.no_worker_since)) is not None:
        message = (
            f"no live worker: no worker's heartbeat has been in the broker for {span(for_s)}, so "
            "nothing takes the run's documents; start `pipeline worker` with this "
            "PIPELINE_REDIS_URL and PIPELINE_DATABASE_URL"
        )
        return Stuck(NO_WORKER, message, for_s, for_s >= bound_s)
    if snap.paused_for_s and (for_s := held(track.paused_since)) is not None:
        message = (
            f"limiter paused: the provider asked for a pause, calls wait {span(snap.paused_for_s)} "
            f"more ({span(for_s)} without progress); it resumes by itself, and a lower "
            "PIPELINE_RATE_LIMIT_RPM keeps the run under the provider's quota"
        )
        return Stuck(PAUSED, message, for_s, for_s >= bound_s)
    if (for_s := held(track.failing_since)) is not None:
        failed = snap.calls_failed - track.failed_at_motion
        error = f" (last: {snap.last_error[:ERROR_CHARS]})" if snap.last_error else ""
        message = (
            f"every call failing: {failed} LLM calls failed and none answered for {span(for_s)}"
            f"{error}; check the endpoint (PIPELINE_LLM_BASE_URL) and key with `pipeline doctor`"
        )
        return Stuck(CALLS_FAILING, message, for_s, for_s >= bound_s)
    return None


def stuck_state(snapshots: Iterable[Snapshot], now: float, bound_s: float) -> Stuck | None:
    """`judge` of the snapshots folded in order."""
    track = Track()
    for snap in snapshots:
        track = advance(track, snap)
    return judge(track, now, bound_s)


def span(seconds: float) -> str:
    """A duration as people read it: 42s, 1m20s, 2h03m."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


@dataclass(frozen=True)
class Figures:
    """One poll's figures, for the bar and the plain line."""

    view: RunStatusView
    calls: CallOutcomes
    stuck: Stuck | None

    @property
    def phase(self) -> str:
        if self.view.status in FINAL_RUN_STATUSES:
            return self.view.status
        return "reporting" if self.view.documents_done == self.view.documents_total else "extracting"

    def counts(self) -> str:
        """Calls and tokens, as both displays show them: failed calls apart from answered ones."""
        failed = f", {self.calls.failed} failed" if self.calls.failed else ""
        tokens = self.view.prompt_tokens + self.view.completion_tokens
        return f"{self.calls.answered} calls answered{failed}, {tokens:,} tokens"

    def line(self) -> str:
        """The plain progress line: `run X: extracting 3/8 documents, 41/120 chunks, …`."""
        view = self.view
        failed = view.documents.get("failed", 0)
        docs = f"{view.documents_done}/{view.documents_total} documents" + (
            f" ({failed} failed)" if failed else ""
        )
        stuck = f"; {self.stuck.name} for {span(self.stuck.held_s)}" if self.stuck else ""
        return (
            f"run {view.run_id}: {self.phase} {docs}, {view.chunks_done}/{view.chunks_total} chunks, "
            f"{self.counts()}, {span(view.elapsed_s)}{stuck}"
        )


class _Probe:
    """Live workers, the longest pause and failed calls, for the snapshots; Redis is asked at
    most every `every_s` (between, its last answers stand)."""

    def __init__(self, engine: Engine, run_id: str, settings: Settings, every_s: float) -> None:
        self.engine, self.run_id, self.settings, self.every_s = engine, run_id, settings, every_s
        self.asked_at: float | None = None
        self.live: int | None = None
        self.paused: float | None = None

    def snapshot(self, view: RunStatusView, now: float) -> tuple[Snapshot, CallOutcomes]:
        if self.asked_at is None or now - self.asked_at >= self.every_s:
            workers = worker_views(self.settings)
            self.live = None if workers is None else len(workers)
            # A Redis that did not answer for the heartbeats is not asked again for the pauses.
            self.paused = None if workers is None else longest_pause_s(self.settings)
            self.asked_at = now
        calls = call_outcomes(self.engine, self.run_id)
        snap = Snapshot(
            at=now,
            documents_done=view.documents_done,
            documents_failed=view.documents.get("failed", 0),
            chunks_done=view.chunks_done,
            calls_ok=calls.answered,
            calls_failed=calls.failed,
            live_workers=self.live,
            paused_for_s=self.paused,
            last_error=calls.last_error,
        )
        return snap, calls


class _Bar:
    """On a terminal: a documents bar and a chunks bar, calls and tokens beside them."""

    def __init__(self, console: Console) -> None:
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
        )
        self.progress = Progress(*columns, console=console, transient=False)
        self.documents = self.progress.add_task("extracting", total=None, detail="")
        self.chunks = self.progress.add_task("chunks", total=None, detail="")

    def __enter__(self) -> _Bar:
        self.progress.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.progress.stop()

    def say(self, text: str) -> None:
        self.progress.console.print(text)

    def show(self, figures: Figures, now: float, final: bool = False) -> None:
        view = figures.view
        failed = view.documents.get("failed", 0)
        stuck = figures.stuck
        warning = f" · [yellow]{stuck.name} {span(stuck.held_s)}[/]" if stuck else ""
        self.progress.update(
            self.documents,
            description=figures.phase,
            total=view.documents_total,
            completed=view.documents_done,
            detail=f"{failed} failed{warning}",
        )
        self.progress.update(
            self.chunks, total=view.chunks_total, completed=view.chunks_done, detail=escape(figures.counts())
        )


class _Lines:
    """Off a terminal: the plain line every `every_s` seconds and at the end."""

    def __init__(self, console: Console, every_s: float) -> None:
        self.console, self.every_s = console, every_s
        self.shown_at: float | None = None

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def say(self, text: str) -> None:
        self.console.print(text)

    def show(self, figures: Figures, now: float, final: bool = False) -> None:
        if self.shown_at is None:
            self.shown_at = now  # the first line comes one interval after "submitted"
        if final or now - self.shown_at >= self.every_s:
            self.console.print(figures.line(), markup=False, highlight=False)
            self.shown_at = now


def wait_for_run(
    engine: Engine,
    run_id: str,
    console: Console,
    settings: Settings,
    *,
    check: Callable[[], str | None] | None = None,
    timeout_s: float | None = None,
) -> RunStatusView:
    """Poll the run until it ends; `check` may abort the wait with a reason (`WaitAborted`), and
    a stuck state held for PIPELINE_WAIT_STUCK_S ends it (`WaitStuck`)."""
    started = time.monotonic()
    deadline = started + timeout_s if timeout_s else None
    probe = _Probe(engine, run_id, settings, min(PROBE_S, settings.wait_stuck_s / 4))
    display = _Bar(console) if console.is_terminal else _Lines(console, settings.progress_interval_s)
    track, named = Track(), None
    with display:
        while True:
            view = run_status(engine, run_id)
            now = time.monotonic()
            snap, calls = probe.snapshot(view, now)
            track = advance(track, snap)
            stuck = judge(track, now, settings.wait_stuck_s)
            figures = Figures(view, calls, stuck)
            final = view.status in FINAL_RUN_STATUSES
            display.show(figures, now, final=final or bool(stuck and stuck.gives_up))
            if final:
                return view
            if stuck and stuck.gives_up:
                raise WaitStuck(stuck)
            if stuck and stuck.name != named:
                display.say(f"[yellow]waiting:[/] {escape(stuck.message)}")
            named = stuck.name if stuck else None
            if check and (problem := check()):
                raise WaitAborted(problem)
            if deadline and now > deadline:
                raise WaitAborted(f"run {run_id} did not finish within {timeout_s:.0f} s")
            time.sleep(REPORTING_POLL_S if figures.phase == "reporting" else POLL_S)
