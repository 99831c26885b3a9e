"""Processes the benchmark runs, and their peak memory (Linux `VmHWM`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.runtime import embedded

READY_TIMEOUT_S = 60.0


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident set so far, in MB (None where /proc has no such field)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def sim_stats(base_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/sim/stats") as answer:
        return dict(json.load(answer))


def sim_configure(base_url: str, **values: Any) -> dict[str, Any]:
    """POST /sim/config: the simulator's knobs from now on (`p50_s=0.3`, `batch_duration_s=2`, …);
    its stats. A knob it does not know is an HTTP error."""
    request = urllib.request.Request(
        base_url.removesuffix("/v1") + "/sim/config",
        data=json.dumps(values).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.load(answer))


@contextmanager
def simulator(logs: Path, args: list[str]) -> Iterator[str]:
    with simulator_process(logs, args) as (url, _):
        yield url


@contextmanager
def simulator_process(logs: Path, args: list[str]) -> Iterator[tuple[str, embedded.Child]]:
    """The simulator's URL and process (whose CPU a regime may measure)."""
    child, url = embedded.start_simulator(embedded.child_env({}), logs, args)
    with child:
        yield url, child


@contextmanager
def workers(
    env: Mapping[str, str], logs: Path, count: int, concurrency: int, argv: list[str] | None = None
) -> Iterator[list[embedded.Child]]:
    """`count` worker processes, ready (their log says so); stopped on exit."""
    full_env = embedded.child_env(env)
    paths = [logs / f"worker-{i}-{time.monotonic_ns()}.log" for i in range(count)]
    children = []
    for i, path in enumerate(paths):
        if argv is None:
            children.append(embedded.start_worker(full_env, path, concurrency, f"bench-{i}-%h"))
        else:
            cmd = [*argv, f"--concurrency={concurrency}", f"--hostname=base-{i}-{time.monotonic_ns()}@%h"]
            children.append(embedded.Child(f"worker-{i}", cmd, env=full_env, log_path=path))
    try:
        embedded.wait_until_ready(children, READY_TIMEOUT_S)
        yield children
    except BaseException:
        embedded.stop_all(children)
        raise
    # The measured work is over: they are asked to stop (a warm shutdown takes a couple of
    # seconds) while the next regime starts; `finish_stopping` waits for them.
    for child in children:
        child.terminate()
    _stopping.extend(children)


_stopping: list[embedded.Child] = []
"""Workers asked to stop whose exit is not waited for yet."""


def finish_stopping() -> None:
    """Wait for every worker asked to stop (killing those that take too long)."""
    embedded.stop_all(_stopping)
    _stopping.clear()


@dataclass(frozen=True)
class Measured:
    out: str
    wall_s: float
    peak_mb: float | None
    cpu_s: float
    """User + system CPU seconds of the process, all its threads (from wait4)."""


def run_measured(
    argv: list[str], env: Mapping[str, str], timeout_s: float, ok_codes: tuple[int, ...] = (0,)
) -> Measured:
    """Run a command to its end; its stdout, wall seconds, peak RSS (MB) and CPU seconds."""
    started = time.monotonic()
    # stdout goes to a file: a pipe nobody reads while we poll would fill up and block it.
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(
            argv, env=embedded.child_env(env), stdout=out, stderr=subprocess.DEVNULL, text=True
        )
        peak: float | None = None
        while True:
            # wait4, not poll(): the child's rusage (CPU, peak RSS) comes with its exit status.
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                process.returncode = os.waitstatus_to_exitcode(status)
                break
            peak = max(peak or 0.0, peak_rss_mb(process.pid) or 0.0) or peak
            if time.monotonic() - started > timeout_s:
                process.kill()
                raise RuntimeError(f"{' '.join(argv[:4])} did not finish within {timeout_s:.0f} s")
            time.sleep(0.05)
        wall = time.monotonic() - started
        out.seek(0)
        text = out.read()
    if process.returncode not in ok_codes:
        raise RuntimeError(f"{' '.join(argv[:4])} exited {process.returncode}")
    peak = max(peak or 0.0, usage.ru_maxrss / 1024)  # ru_maxrss: KB on Linux
    return Measured(text, wall, peak, usage.ru_utime + usage.ru_stime)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process (all its threads) has used so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def pipeline_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", *args]
