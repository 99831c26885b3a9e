"""`pipeline run` stopped by SIGTERM: what it started ends, and its run says why. A file of its
own: the test takes a minute, and pytest-xdist (--dist loadfile) then runs it beside the quick
start's, not after it."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_local_run import ROOT, _quick_start_env


def test_sigterm_ends_what_pipeline_run_started_and_marks_its_run(tmp_path: Path) -> None:
    import psutil
    from sqlalchemy import create_engine, text

    from tests.conftest import eventually, running_simulator

    err = tmp_path / "stderr.txt"
    with running_simulator(tmp_path, "--p50", "2", "--p95", "3") as slow:  # the run is still going
        with err.open("w") as stderr:
            command = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "run", str(ROOT / "examples" / "filings")],
                cwd=tmp_path,
                env=_quick_start_env(PIPELINE_LLM_BASE_URL=slow),
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
            try:
                eventually(
                    "the run submitted",
                    lambda: "submitted" in err.read_text() or command.poll() is not None,
                    120,
                )
                started = psutil.Process(command.pid).children(recursive=True)
                assert len(started) >= 3, err.read_text()  # redis-server and two workers
                command.send_signal(signal.SIGTERM)
                command.wait(timeout=120)
            finally:
                if command.poll() is None:
                    command.kill()
    said = err.read_text()
    assert command.returncode == 130, said
    assert "cancelled: pipeline run was stopped by SIGTERM with " in said, said
    for child in started:  # each was stopped and waited for: none runs on
        assert _gone(child), (child, said)
    engine = create_engine(f"sqlite:///{tmp_path / '.pipeline' / 'pipeline.db'}")
    with engine.connect() as conn:
        status, error = conn.execute(text("select status, error from runs")).one()
    engine.dispose()
    assert status == "cancelled" and "stopped by SIGTERM" in error, said


def _gone(process: Any) -> bool:
    import psutil

    try:
        return bool(process.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_a_sigterm_whose_exception_python_swallowed_is_raised_at_the_next_poll() -> None:
    """A signal handler's exception lands wherever the main thread is; in a weakref callback
    (importlib's module locks) Python prints it as ignored and goes on. The waiting loop's poll
    raises it again, once (the CI run that found it: `pipeline run` went on to its end)."""
    from pipeline.cli.base import Terminated, raise_if_terminated, stop_on_sigterm

    before = signal.getsignal(signal.SIGTERM)
    try:
        stop_on_sigterm()
        with contextlib.suppress(Terminated):  # where Python would have swallowed it
            signal.raise_signal(signal.SIGTERM)
        with pytest.raises(Terminated):
            raise_if_terminated()
        raise_if_terminated()  # raised once only
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_sigterm_wrapped_in_another_error_still_exits_as_a_stop() -> None:
    """A handler's exception that lands in a class's creation (a lazy import of rich.progress
    under SIGTERM) comes out as a RuntimeError caused by it: the command says it was stopped and
    exits 130, not 70 with an internal error."""
    import click
    from click.testing import CliRunner

    from pipeline.cli.base import PipelineGroup, Terminated
    from pipeline.core import exits

    class Descriptor:
        def __set_name__(self, owner: type, name: str) -> None:
            raise Terminated  # where the signal's exception lands

    @click.group(cls=PipelineGroup)
    def group() -> None:
        pass

    @group.command()
    def lazy() -> None:
        type("Task", (), {"stop_time": Descriptor()})  # Python wraps it in a RuntimeError

    result = CliRunner().invoke(group, ["lazy"])
    assert result.exit_code == exits.INTERRUPTED, result.output
    assert "stopped by SIGTERM" in result.output and "internal error" not in result.output


def test_a_wrapped_stop_reaches_the_command_s_own_handler_and_other_errors_pass() -> None:
    """Inside `interrupts_unwrapped` the command's `except KeyboardInterrupt` (which marks its
    run) sees the stop itself; an error with no stop behind it is raised unchanged."""
    from pipeline.cli.base import Terminated, interrupts_unwrapped

    stop = Terminated()
    with pytest.raises(Terminated) as caught, interrupts_unwrapped():
        raise RuntimeError("Error calling __set_name__") from stop
    assert caught.value is stop
    with pytest.raises(RuntimeError, match="its own"), interrupts_unwrapped():
        raise RuntimeError("its own")
