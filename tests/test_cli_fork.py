"""The CLI zygote (tests/cli_fork.py) behaves as `subprocess.run` of `python -m pipeline` does."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_fork import Zygote
from tests.conftest import ROOT, eventually

BARE = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
"""An environment without the session's PIPELINE_* settings."""


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    forks = Zygote(ROOT)
    yield forks
    forks.close()


def test_each_command_reads_its_own_environment_and_directory(zygote: Zygote, tmp_path: Path) -> None:
    """Settings come from each command's environment and its directory's .env, never from the
    zygote's or an earlier command's."""
    for index, name in enumerate(("one", "two"), start=1):
        folder = tmp_path / name
        folder.mkdir()
        (folder / ".env").write_text(f"PIPELINE_REDIS_URL=redis://127.0.0.1:9/{index}\n")
        env = {**BARE, "PIPELINE_DATABASE_URL": f"sqlite:///{folder / 'p.db'}"}
        done = zygote.run(["cancel", "no-such-run"], env, folder, 60)
        assert done.returncode == 2 and "no run matches" in done.stderr, done.stderr
        assert f"database sqlite file {folder / 'p.db'} (environment)" in done.stderr, done.stderr
        assert f"broker 127.0.0.1:9/{index} (.env)" in done.stderr, done.stderr


def test_exit_codes_and_the_two_streams_are_the_commands(zygote: Zygote, tmp_path: Path) -> None:
    env = {**BARE, "PIPELINE_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}"}
    refused = zygote.run(["report", "no-such-run"], env, tmp_path, 60)
    assert refused.returncode == 2 and "error:" in refused.stderr and refused.stdout == "", refused
    assert "Usage:" in zygote.run(["--help"], env, tmp_path, 60).stdout
    unknown = zygote.run(["no-such-command"], env, tmp_path, 60)
    assert unknown.returncode == 2 and "No such command" in unknown.stderr


def test_a_fast_commands_pid_and_exit_code_read_together_are_both_taken_at_once(
    zygote: Zygote, tmp_path: Path
) -> None:
    """The two answers of a command that ends at once can reach the pipe before the first is
    read, and one read takes both: the second is then taken from what was read, not waited for
    on the pipe (which once timed a fast command out under load and left every later answer one
    behind)."""
    zygote.run(["--version"], BARE, tmp_path, 60)  # the zygote started
    zygote._send(
        {
            "args": ["--version"],
            "env": BARE,
            "cwd": str(tmp_path),
            "stdout": "/dev/null",
            "stderr": "/dev/null",
        }
    )
    both = len('{"pid": 1}\n') + len('{"code": 0}\n')  # more than a pid line alone, of any pid
    eventually("both answers in the pipe", lambda: _unread(zygote) >= both)
    started = zygote._answer(None)
    assert started is not None and "pid" in started
    assert zygote._answer(0.0) == {"code": 0}


def _unread(zygote: Zygote) -> int:
    assert zygote.answers is not None
    return int(struct.unpack("i", fcntl.ioctl(zygote.answers, termios.FIONREAD, b"\0" * 4))[0])


def test_a_command_past_its_timeout_is_killed_and_the_next_one_runs(zygote: Zygote, tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run(["sim", "--port", "0"], BARE, tmp_path, timeout_s=3)
    assert zygote.run(["--version"], BARE, tmp_path, 60).returncode == 0


def test_a_spawned_command_is_this_process_s_child_to_wait_for_and_signal(
    zygote: Zygote, tmp_path: Path
) -> None:
    """A long-running command (a simulator here) is adopted by the test process: `wait` times out
    while it runs, and a signal's death is a negative return code, as with `subprocess.Popen`."""
    said, log = tmp_path / "sim.out", tmp_path / "sim.log"
    child = zygote.spawn(["sim", "--port", "0"], BARE, log, said)
    try:
        assert os.waitpid(child.pid, os.WNOHANG) == (0, 0), "a child of this process, running"
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(0.2)
        eventually("the simulator's address", lambda: "http://" in said.read_text())
        assert os.getsid(child.pid) == child.pid, "in a session of its own"
    finally:
        child.kill()
    assert child.wait(10) == -9 and child.poll() == -9
