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
every POLL_S on the database (`submit_watch`): when the first document was taken by a worker
(`started_at` set: workers busy) and when the first was extracted, both as seen by the poll and
as stamped on the rows (the database's clock); how long the workers sat idle while the submit
ran (polls in which no document was running and none was newly extracted) and how many
documents were extracted by the submit's end. Once the submit has exited and a first extraction
was seen, the workers are stopped: the run is not waited for. The codes alternate, old, new,
new, old, so that the load of a shared machine weighs on both alike (one of each below
ALTERNATE_FROM documents).

`pipeline bench --regimes submit-run` is the same, with the run waited for (at most
RUN_TIMEOUT_S after the submit's end): what an operator waits for, the submit's start to the
run's report (the run row's finished_at), the documents extracted and failed at its end, and
the workers' idle seconds over the whole run, each code's, and new / old of both walls.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.runtime import embedded
from pipeline_dev.bench import procs
from pipeline_dev.bench.submit_watch import Watch

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
SEEN_TIMEOUT_S = 300.0
"""How long after the submit's end a first extraction is waited for before the workers stop."""
RUN_TIMEOUT_S = 4 * 3600.0
"""`submit-run`: how long after the submit's end the run's report is waited for (two workers
extract ~20 of these documents a second from a simulator that answers at once: ~17 min at
20,000)."""
ALTERNATE_FROM = 1_000
GOAL_FIRST_EXTRACTED_S = 5.0
GOAL_BUSY_S = 10.0
GOAL_WALL_RATIO = 0.5
ISSUE_OLD_WALL_S = 181.0
"""The issue's submit of 20,000 filings, on its machine (not this one: the ratio is measured)."""


def submit_side_by_side(cfg: BenchConfig, *, alone: bool = False, until_finished: bool = False) -> Result:
    """Each code's submits, alternating; the goals judged on the new code's (worst round). With
    `alone` (`submit-alone`), no worker runs: the submit command by itself, with the machine's
    CPUs to itself (the old code's workers sat idle while it stored; the new code's extract, on
    the same CPUs, as the submit stores). With `until_finished` (`submit-run`), each run is
    waited for to its report, and its wall set beside the submit's."""
    from pipeline_dev.bench.regimes import filings

    n = cfg.count(FILINGS)
    files = filings(cfg, f"submit-{n}", n, LOW_BYTES, HIGH_BYTES)
    with tree(NEW_REVISION) as new_root, tree(OLD_REVISION) as old_root:
        roots = {"new": new_root or REPO, "old": old_root}
        # What each side runs, read in its tree: HEAD may move while the regime runs.
        commits = {code: _git("rev-parse", "HEAD", at=root) if root else None for code, root in roots.items()}
        order = ["old", "new", "new", "old"] if n >= ALTERNATE_FROM else ["old", "new"]
        if old_root is None:
            order = [code for code in order if code == "new"]
        runs = []
        for i, code in enumerate(order):
            root: Path = roots[code]  # type: ignore[assignment]  # the old side runs where there is one
            measured = measure(cfg, files, root, f"{code}{i}", alone=alone, until_finished=until_finished)
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
    whole = run_ratios(runs, new, old) if until_finished else {}
    return {
        "documents": n,
        "wall_s": new["wall_s"],
        "lost": None,
        "old_revision": OLD_REVISION,
        "old_commit": commits["old"],
        "new_commit": commits["new"],
        "order": order,
        "runs": runs,
        "new": new,
        "old": old,
        "wall_ratio": wall_ratio,
        "cpu_ratio": round(new["cpu_s"] / old["cpu_s"], 3) if old else None,
        "goals": goals,
        "goal": "; ".join(goals),
        "met": all(goals.values()) if None not in goals.values() else None,
        **whole,
    }


def run_ratios(runs: list[dict[str, Any]], new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """`submit-run`'s figures beside the submit's: new / old of the run's wall, and the documents
    no round saw final (`lost`: the most of any round, None when a round's run did not finish)."""
    finished = all(r["run_finished"] for r in runs)
    return {
        "run_wall_ratio": round(new["run_wall_s"] / old["run_wall_s"], 3)
        if old and new["run_wall_s"] and old["run_wall_s"]
        else None,
        "run_wall_s": new["run_wall_s"],
        "lost": max((int(r["unfinished_at_finish"]) for r in runs), default=0) if finished else None,
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
        **(
            {
                "run_wall_s": mean("run_wall_s"),
                "run_wall_s_worst": worst("run_wall_s"),
                "idle_s_during_run": mean("idle_s_during_run"),
                "extracted_at_finish": mean("extracted_at_finish"),
                "failed_at_finish": mean("failed_at_finish"),
            }
            if runs and "run_wall_s" in runs[0]
            else {}
        ),
    }


def measure(
    cfg: BenchConfig, files: Path, root: Path, tag: str, *, alone: bool = False, until_finished: bool = False
) -> dict[str, Any]:
    """One submit of `files` by the code at `root`, on a fresh database, Redis and workers
    (`until_finished`: and its run, to its report)."""
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
                watched = watch_submit(
                    env,
                    files,
                    db_url,
                    0.0 if alone else SEEN_TIMEOUT_S,
                    run_timeout_s=RUN_TIMEOUT_S if until_finished else None,
                )
            finally:
                embedded.stop_all(children)
    return {"imported": imported["pipeline"], **watched}


def watch_submit(
    env: dict[str, str],
    files: Path,
    db_url: str,
    seen_timeout_s: float = SEEN_TIMEOUT_S,
    *,
    run_timeout_s: float | None = None,
) -> dict[str, Any]:
    """`pipeline submit FILES --fresh` with `env` (workers running), watched from its start on
    `db_url` (the documents of `files` alone) until it ends and a first document is extracted
    (or `seen_timeout_s` after it ends). With `run_timeout_s`, until its run is finished (or
    that long after the submit's end), and the run's figures too."""
    load_before = os.getloadavg()
    watch = Watch(db_url, str(files))
    watch.start()
    try:
        measured = procs.run_measured(
            procs.pipeline_cli("submit", str(files), "--fresh"), env, timeout_s=3 * 3600
        )
        said = measured.out.strip().splitlines()
        watch.submit_ended(said[-1] if said else None)  # the run id: stdout's last line
        if run_timeout_s is not None:
            watch.wait_finished(run_timeout_s)
        seen = watch.wait_extracted(0.0 if run_timeout_s is not None else seen_timeout_s)
    finally:
        watch.stop()
    return {
        "wall_s": round(measured.wall_s, 2),
        "cpu_s": round(measured.cpu_s, 2),
        "peak_mb": round(measured.peak_mb or 0.0, 1),
        **watch.figures(),
        "first_extracted_seen": seen,
        **(watch.run_figures() if run_timeout_s is not None else {}),
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


def _git(*args: str, at: Path = REPO) -> str | None:
    if shutil.which("git") is None:
        return None
    done = subprocess.run(["git", "-C", str(at), *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None
