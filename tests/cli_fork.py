"""`pipeline` processes for the tests, forked from one that has already imported the libraries.

A `python -m pipeline status` spends about 0.7 s of CPU, most of it importing SQLAlchemy,
pydantic, Celery, openai and rich before it reads a row. The suite runs a few hundred commands,
on two cores, so the imports were a fifth of its CPU. Each test process therefore keeps one
*zygote*: a Python that imports those once, then forks a child per command. The child is a process
of its own, as `subprocess.run` gives: its own environment, working directory, stdout and stderr,
exit code (a signal's as a negative one), `atexit` handlers and non-daemon threads waited for at
exit. Only the imports are shared, and they are imports of modules that read nothing from the
environment when imported: the zygote never imports `workers` (its Celery app binds the broker's
URL when imported) and never calls `get_settings`.

Long-running commands (workers, simulators: `Zygote.spawn`) fork the same way, through a
go-between that exits at once: the test process, a child subreaper, adopts them, and waits for and
signals them as `subprocess.Popen` children (`Adopted`).

`PIPELINE_TEST_CLI_FORK=0` runs each command with `subprocess` instead.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

PRELOAD = (
    "alembic.command",
    "celery",
    "celery.app.base",
    "click",
    "httpx",
    "kombu.transport.redis",
    "openai",
    "openai.resources",
    "opentelemetry.sdk.trace",
    "psutil",
    "psycopg",
    "pydantic",
    "pydantic_settings",
    "rapidfuzz",
    "redis",
    "rich.console",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.orm",
    "lxml.html",
    "tiktoken",
    # The CLI's own modules read no setting when imported (test_cli_fork checks a fork's
    # settings come from its environment); `workers` is never imported here.
    "pipeline.cli",
)


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter exits with for `exc` (`sys.exit("why")` prints why, then 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become `python -m pipeline ARGS` in the request's environment and
    directory, writing to its files; exit as the interpreter would."""
    import runpy

    code = 1
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(str(request["cwd"]))
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if request.get("append") else os.O_TRUNC)
        for fd, key in ((1, "stdout"), (2, "stderr")):
            opened = os.open(str(request[key]), flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.path[0] = os.getcwd()  # as `python -m` puts it
        sys.argv = ["pipeline", *request["args"]]
        try:
            runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # the interpreter waits for them too
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def serve(requests: IO[str], answers: IO[str]) -> None:
    """The zygote: for each request line, fork a child, say its pid, then its exit code."""
    for name in PRELOAD:
        importlib.import_module(name)
    from pipeline.core.settings import get_settings
    from pipeline.llm.tokens import FALLBACK_ENCODING, encoding

    encoding(FALLBACK_ENCODING)  # the rank file, decoded once (0.4 s a submit or plan otherwise)

    # What a fork must not inherit: the broker URL bound by `workers.app`, settings read here.
    assert not [m for m in sys.modules if m.split(".")[0] == "workers"], "the zygote imported workers"
    assert get_settings.cache_info().currsize == 0, "the zygote read its settings"
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            requests.close()
            if request.get("spawn"):
                _detach(request, answers)
            answers.close()
            _child(request)
        if request.get("spawn"):
            os.waitpid(pid, 0)  # the go-between: its child is the test process's now
            answers.write(json.dumps({"adopted": True}) + "\n")
            answers.flush()
            continue
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()


def _detach(request: dict[str, Any], answers: IO[str]) -> None:
    """In a go-between child: fork the long-running command (in a session of its own, as
    `start_new_session` gives), say its pid and exit, so that the command is orphaned and adopted
    by the nearest subreaper: the test process (`adopt_orphans`), which can then wait for it as for
    its own."""
    pid = os.fork()
    if pid != 0:
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        os._exit(0)
    os.setsid()


class Zygote:
    """The test process's side: one zygote, started on the first command, one command at a
    time (a lock: a test may run commands from threads)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None
        self.requests: IO[str] | None = None
        self.answers: int | None = None
        """The answers pipe, read unbuffered: `select` sees only what is still in the pipe."""
        self.pending = b""
        """What was read of the answers and not yet taken (a fast command's pid and exit code
        arrive together)."""
        self.scratch = Path(tempfile.mkdtemp(prefix="pipeline-cli-"))

    def _start(self) -> None:
        ours_r, theirs_w = os.pipe()
        theirs_r, ours_w = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_fork", str(theirs_r), str(theirs_w)],
            pass_fds=(theirs_r, theirs_w),
            stdin=subprocess.DEVNULL,
            cwd=self.root,
        )
        os.close(theirs_r)
        os.close(theirs_w)
        self.requests = os.fdopen(ours_w, "w")
        self.answers, self.pending = ours_r, b""

    def _answer(self, timeout_s: float | None) -> dict[str, int] | None:
        """The zygote's next answer line, or None when none came within `timeout_s`."""
        assert self.answers is not None and self.process is not None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self.pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if left is not None and not select.select([self.answers], [], [], left)[0]:
                return None
            chunk = os.read(self.answers, 4096)
            if not chunk:
                code = self.process.wait()
                os.close(self.answers)
                self.process, self.answers = None, None
                raise RuntimeError(
                    f"the CLI zygote (tests/cli_fork.py) exited with {code}: see the test's stderr"
                )
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        answer: dict[str, int] = json.loads(line)
        return answer

    def _send(self, request: dict[str, Any]) -> None:
        if self.process is None:
            self._start()
        assert self.requests is not None
        self.requests.write(json.dumps(request) + "\n")
        self.requests.flush()

    def spawn(
        self, args: list[str], env: dict[str, str], log_path: Path, stdout_path: Path | None = None
    ) -> Adopted:
        """`python -m pipeline ARGS` left running (a worker, a simulator), as a child of this
        process, in a session of its own; its stderr (and stdout, unless `stdout_path`) appended
        to `log_path`."""
        adopt_orphans()
        with self.lock:
            request = {
                "spawn": True,
                "append": True,
                "args": args,
                "env": env,
                "cwd": os.getcwd(),
                "stdout": str(stdout_path or log_path),
                "stderr": str(log_path),
            }
            self._send(request)
            started = self._answer(None)
            assert started is not None and self._answer(None) == {"adopted": True}
            return Adopted(started["pid"], [sys.executable, "-m", "pipeline", *args])

    def run(
        self, args: list[str], env: dict[str, str], cwd: Path | None, timeout_s: float
    ) -> subprocess.CompletedProcess[str]:
        with self.lock:
            out, err = self.scratch / "stdout", self.scratch / "stderr"
            out.write_bytes(b"")
            err.write_bytes(b"")
            request = {
                "args": args,
                "env": env,
                "cwd": str(cwd or os.getcwd()),
                "stdout": str(out),
                "stderr": str(err),
            }
            self._send(request)
            started = self._answer(None)
            assert started is not None
            ended = self._answer(timeout_s)
            argv = [sys.executable, "-m", "pipeline", *args]
            if ended is None:
                with contextlib.suppress(ProcessLookupError):  # it ended at the deadline
                    os.kill(started["pid"], signal.SIGKILL)
                self._answer(None)
                raise subprocess.TimeoutExpired(argv, timeout_s, out.read_bytes(), err.read_bytes())
            return subprocess.CompletedProcess(
                argv, ended["code"], out.read_text(errors="replace"), err.read_text(errors="replace")
            )

    def close(self) -> None:
        with self.lock:
            if self.process is not None and self.requests is not None:
                self.requests.close()  # its loop ends at end of file
                self.process.wait(30)
                self.process = None
            if self.answers is not None:
                os.close(self.answers)
                self.answers = None


PR_SET_CHILD_SUBREAPER = 36
_adopting = False


def adopt_orphans() -> None:
    """Make this process the parent of its orphaned descendants (Linux's child subreaper), the
    zygote's long-running children among them."""
    global _adopting
    if not _adopting:
        if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        _adopting = True


class Adopted:
    """What `subprocess.Popen` offers for a process this one adopted (`Zygote.spawn`): its pid,
    poll, wait, signals and return code (negative for a signal)."""

    stdout = None

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid, self.args = pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            pidfd = os.pidfd_open(self.pid)
            try:
                if not select.select([pidfd], [], [], timeout)[0]:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
            finally:
                os.close(pidfd)
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


if __name__ == "__main__":
    serve(os.fdopen(int(sys.argv[1]), "r"), os.fdopen(int(sys.argv[2]), "w"))
