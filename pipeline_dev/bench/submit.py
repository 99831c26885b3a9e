"""The streaming submit against the submit of before (issue 49), side by side in one bench run.

`pipeline bench --regimes submit`: N generated filings of 4-30 KB (the issue's; 20,000 at scale
1) submitted with `pipeline submit FILES --fresh` (no --wait) by the code of HEAD and by the code
of before the streaming submit (`OLD_REVISION`), each checked out into a temporary `git worktree`
(removed afterwards; without git, this checkout's code alone), each on its own fresh database (a scratch database on the server of
`PIPELINE_DATABASE_URL`, or a SQLite file), its own private Redis, a simulator with no latency
and no limit, and two workers of its own code (the message formats may differ). Each code's
processes run with PYTHONPATH at its tree (and PYTHONSAFEPATH, so that `python -m` does not put
the working directory, this checkout, first), so its own migrations create its schema; the regime
checks, in a child with that environment, that `pipeline` and `workers` are imported from it.

For each submit: its wall and CPU seconds (wait4) from its start, and, polled from this process
every POLL_S on the database: when the first document was taken by a worker (`started_at` set:
workers busy) and when the first was extracted, both as seen by the poll and as stamped on the
rows (the database's clock); how long the workers sat idle while the submit ran (polls in which
no document was running and none was newly extracted) and how many documents were extracted by
the submit's end. Once the submit has exited and a first extraction was seen, the workers are
stopped: the run is not waited for. The codes alternate, old, new, new, old, so that the load
of a shared machine weighs on both alike (one of each below ALTERNATE_FROM documents).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.runtime import embedded
from pipeline_dev.bench import procs

if TYPE_CHECKING:
    from pipeline_dev.bench.regimes import BenchConfig, Result

NEW_REVISION = "HEAD"
"""The code measured as new: the commit checked out (a worktree of it, not this checkout's files,
which other work may be changing while the regime runs)."""
OLD_REVISION = "7bdfcd4^"
"""The submit of before: it stored every file (the first `early_documents` sent at once), then
sent the rest of the run as one chord, a round trip per message."""
REPO = Path(__file__).resolve().parents[2]
FILINGS = 20_000
LOW_BYTES, HIGH_BYTES = 4_000, 30_000
POLL_S = 0.05
SEEN_TIMEOUT_S = 300.0
"""How long after the submit's end a first extraction is waited for before the workers stop."""
ALTERNATE_FROM = 1_000
GOAL_FIRST_EXTRACTED_S = 5.0
GOAL_BUSY_S = 10.0
GOAL_WALL_RATIO = 0.5
ISSUE_OLD_WALL_S = 181.0
"""The issue's submit of 20,000 filings, on its machine (not this one: the ratio is measured)."""

PROGRESS = """
select count(*), count(started_at),
       sum(case when status = 'running' then 1 else 0 end),
       sum(case when status = 'extracted' then 1 else 0 end),
       min(started_at), min(case when status = 'extracted' then finished_at end)
from documents where path like :files
"""


def submit_side_by_side(cfg: BenchConfig, *, alone: bool = False) -> Result:
    """Each code's submits, alternating; the goals judged on the new code's (worst round). With
    `alone` (`submit-alone`), no worker runs: the submit command by itself, with the machine's
    CPUs to itself (the old code's workers sat idle while it stored; the new code's extract, on
    the same CPUs, as the submit stores)."""
    from pipeline_dev.bench.regimes import filings

    n = cfg.count(FILINGS)
    files = filings(cfg, f"submit-{n}", n, LOW_BYTES, HIGH_BYTES)
    with tree(NEW_REVISION) as new_root, tree(OLD_REVISION) as old_root:
        roots = {"new": new_root or REPO, "old": old_root}
        order = ["old", "new", "new", "old"] if n >= ALTERNATE_FROM else ["old", "new"]
        if old_root is None:
            order = [code for code in order if code == "new"]
        runs = []
        for i, code in enumerate(order):
            measured = measure(cfg, files, roots[code], f"{code}{i}", alone=alone)  # type: ignore[arg-type]
            runs.append({"code": code, **measured})
            print(f"submit regime, {code}: {json.dumps(runs[-1])}", flush=True)  # a long regime
    new = summary([r for r in runs if r["code"] == "new"])
    old = summary([r for r in runs if r["code"] == "old"]) if old_root else None
    wall_ratio = round(new["wall_s"] / old["wall_s"], 3) if old else None
    goals = {
        f"first document extracted <= {GOAL_FIRST_EXTRACTED_S:g} s": _within(
            new["first_extracted_s_worst"], GOAL_FIRST_EXTRACTED_S
        ),
        f"workers busy (first document taken) <= {GOAL_BUSY_S:g} s": _within(
            new["first_taken_s_worst"], GOAL_BUSY_S
        ),
        f"submit wall <= {GOAL_WALL_RATIO:g} x the old submit's": None
        if wall_ratio is None
        else wall_ratio <= GOAL_WALL_RATIO,
    }
    if alone:  # no worker takes a document
        goals = {key: met for key, met in goals.items() if key.startswith("submit wall")}
    return {
        "documents": n,
        "wall_s": new["wall_s"],
        "lost": None,
        "old_revision": OLD_REVISION,
        "old_commit": _git("rev-parse", OLD_REVISION) if old_root else None,
        "new_commit": _git("rev-parse", NEW_REVISION),
        "order": order,
        "runs": runs,
        "new": new,
        "old": old,
        "wall_ratio": wall_ratio,
        "cpu_ratio": round(new["cpu_s"] / old["cpu_s"], 3) if old else None,
        "goals": goals,
        "goal": "; ".join(goals),
        "met": all(goals.values()) if None not in goals.values() else None,
    }


def _within(value: float | None, limit: float) -> bool:
    return value is not None and value <= limit


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One code's rounds: the means, and the worst of each moment (the goals are per run)."""

    def mean(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return round(statistics.fmean(values), 2) if values else None

    def worst(key: str) -> float | None:
        values = [r[key] for r in runs]
        return None if not values or None in values else max(values)

    return {
        "rounds": len(runs),
        "wall_s": mean("wall_s"),
        "cpu_s": mean("cpu_s"),
        "first_taken_s": mean("first_taken_s"),
        "first_extracted_s": mean("first_extracted_s"),
        "first_taken_s_worst": worst("first_taken_s"),
        "first_extracted_s_worst": worst("first_extracted_s"),
        "idle_s_during_submit": mean("idle_s_during_submit"),
        "extracted_by_submit_end": mean("extracted_by_submit_end"),
    }


def measure(cfg: BenchConfig, files: Path, root: Path, tag: str, *, alone: bool = False) -> dict[str, Any]:
    """One submit of `files` by the code at `root`, on a fresh database, Redis and workers."""
    logs = Path(tempfile.mkdtemp(dir=cfg.work_dir, prefix=f"logs-submit-{tag}-"))
    redis_child, redis_url = embedded.start_redis(logs / "redis")
    with redis_child, fresh_database(cfg.database_url, cfg.work_dir, tag) as db_url:
        with procs.simulator(logs, ["--p50", "0", "--p95", "0"]) as sim_url:
            env = cfg.env(sim_url) | {
                "PIPELINE_DATABASE_URL": db_url,
                "PIPELINE_REDIS_URL": redis_url,
                "PYTHONPATH": str(root),
                "PYTHONSAFEPATH": "1",  # not the working directory first (`-m`, `-c`): this checkout
            }
            imported = code_files(env)
            if not all(Path(f).is_relative_to(root) for f in imported.values()):
                raise RuntimeError(f"the {tag} side imports {imported}, not the code at {root}")
            procs.run_measured(procs.pipeline_cli("db", "upgrade"), env, timeout_s=600)
            full_env = embedded.child_env(env)
            children = [
                embedded.start_worker(
                    full_env, logs / f"worker-{i}.log", cfg.concurrency, f"submit-{tag}-{i}"
                )
                for i in range(0 if alone else cfg.workers)
            ]
            try:
                embedded.wait_until_ready(children, procs.READY_TIMEOUT_S)
                watched = watch_submit(env, files, db_url, 0.0 if alone else SEEN_TIMEOUT_S)
            finally:
                embedded.stop_all(children)
    return {"imported": imported["pipeline"], **watched}


def watch_submit(
    env: dict[str, str], files: Path, db_url: str, seen_timeout_s: float = SEEN_TIMEOUT_S
) -> dict[str, Any]:
    """`pipeline submit FILES --fresh` with `env` (workers running), watched from its start on
    `db_url` (the documents of `files` alone) until it ends and a first document is extracted
    (or SEEN_TIMEOUT_S after it ends)."""
    load_before = os.getloadavg()
    watch = Watch(db_url, str(files))
    watch.start()
    try:
        measured = procs.run_measured(
            procs.pipeline_cli("submit", str(files), "--fresh"), env, timeout_s=3 * 3600
        )
        watch.submit_ended()
        seen = watch.wait_extracted(seen_timeout_s)
    finally:
        watch.stop()
    return {
        "wall_s": round(measured.wall_s, 2),
        "cpu_s": round(measured.cpu_s, 2),
        "peak_mb": round(measured.peak_mb or 0.0, 1),
        **watch.figures(),
        "first_extracted_seen": seen,
        "load_average_before": [round(x, 1) for x in load_before],
        "load_average_after": [round(x, 1) for x in os.getloadavg()],
    }


def code_files(env: dict[str, str]) -> dict[str, str]:
    """Where a child with `env` imports `pipeline` and `workers` from."""
    script = "import pipeline, workers; print(pipeline.__file__); print(workers.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=embedded.child_env(env),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {"pipeline": out[0], "workers": out[1]}


@dataclass
class Watch:
    """Polls the documents of a directory's files from its submit's start (this process, every
    POLL_S)."""

    url: str
    files: str
    started: float = 0.0
    started_wall: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended: float | None = None
    first_taken: float | None = None
    first_extracted: float | None = None
    stamped_taken: datetime | None = None
    stamped_extracted: datetime | None = None
    idle_s: float = 0.0
    at_end: tuple[int, int] = (0, 0)
    polls: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _extracted: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        from sqlalchemy import create_engine

        self._engine = create_engine(self.url)
        self._connection = self._engine.connect()  # connected before the clock starts
        self.started, self.started_wall = time.monotonic(), datetime.now(UTC)
        self._thread = threading.Thread(target=self._poll, name="submit-watch", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        from sqlalchemy import text

        last_extracted, last_t = 0, 0.0
        while not self._stop.is_set():
            row = self._connection.execute(text(PROGRESS), {"files": self.files + "%"}).one()
            self._connection.rollback()  # no snapshot kept between polls (SQLite)
            t = time.monotonic() - self.started
            stored, taken, running, extracted = (int(x or 0) for x in row[:4])
            self.polls += 1
            if taken and self.first_taken is None:
                self.first_taken, self.stamped_taken = t, _aware(row[4])
            if extracted and self.first_extracted is None:
                self.first_extracted, self.stamped_extracted = t, _aware(row[5])
                self._extracted.set()
            if self.ended is None:
                if self.first_taken is not None and not running and extracted == last_extracted:
                    self.idle_s += t - last_t
                self.at_end = (stored, extracted)
            last_extracted, last_t = extracted, t
            self._stop.wait(POLL_S)

    def submit_ended(self) -> None:
        self.ended = time.monotonic() - self.started

    def wait_extracted(self, timeout_s: float) -> bool:
        return self._extracted.wait(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._connection.close()
        self._engine.dispose()

    def figures(self) -> dict[str, Any]:
        def since_start(stamp: datetime | None) -> float | None:
            return None if stamp is None else round((stamp - self.started_wall).total_seconds(), 2)

        return {
            "first_taken_s": _round(self.first_taken),
            "first_extracted_s": _round(self.first_extracted),
            "first_taken_stamped_s": since_start(self.stamped_taken),
            "first_extracted_stamped_s": since_start(self.stamped_extracted),
            "idle_s_during_submit": round(self.idle_s, 2),
            "stored_by_submit_end": self.at_end[0],
            "extracted_by_submit_end": self.at_end[1],
            "polls": self.polls,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _aware(value: Any) -> datetime | None:
    """A row's timestamp as an aware UTC datetime (SQLite's come back naive, or as text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    stamp: datetime = value
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


@contextmanager
def fresh_database(url: str, work_dir: Path, tag: str) -> Iterator[str]:
    """An empty database beside `url`'s (no schema: each code's processes migrate it); gone after."""
    if url.startswith("sqlite"):
        path = work_dir / f"submit-{tag}-{uuid.uuid4().hex[:6]}.db"
        try:
            yield f"sqlite:///{path}"
        finally:
            for leftover in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                leftover.unlink(missing_ok=True)
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"pipeline_submit_{tag}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def tree(revision: str) -> Iterator[Path | None]:
    """`revision` checked out into a temporary git worktree (removed after); None without git."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        yield None
        return
    parent = Path(tempfile.mkdtemp(prefix="pipeline-submit-tree-"))
    tree = parent / "tree"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree), revision],
        check=True,
        capture_output=True,
    )
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(parent, ignore_errors=True)


def _git(*args: str) -> str | None:
    if shutil.which("git") is None:
        return None
    done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None
