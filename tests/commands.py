"""`pipeline` commands run side by side, as separate processes: what each printed."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from pipeline.runtime import embedded
from tests.conftest import forking, pipeline_child


def outputs_of(
    env: dict[str, str], commands: list[list[str]], folder: Path, timeout_s: float = 120
) -> list[tuple[str, str]]:
    """What each `pipeline ARGS` printed (stdout, stderr), the commands run at once, each ending
    with 0: forked from the zygote (tests/cli_fork.py, no second of imports each), their output
    in files in `folder`; under PIPELINE_TEST_CLI_FORK=0 started by `subprocess`."""
    if not forking():
        return _outputs_of_popen(env, commands, timeout_s)
    started = []
    for args in commands:
        out, err = (folder / f"command-{uuid.uuid4().hex[:8]}.{kind}" for kind in ("out", "err"))
        started.append((pipeline_child(args[0], args, embedded.child_env(env), err, out), out, err))
    outputs = []
    for args, (child, out, err) in zip(commands, started, strict=True):
        assert child.process.wait(timeout_s) == 0, (args, err.read_text())
        outputs.append((out.read_text(), err.read_text()))
    return outputs


def _outputs_of_popen(
    env: dict[str, str], commands: list[list[str]], timeout_s: float
) -> list[tuple[str, str]]:
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "pipeline", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=embedded.child_env(env),
        )
        for args in commands
    ]
    outputs = []
    for args, process in zip(commands, started, strict=True):
        out, err = process.communicate(timeout=timeout_s)
        assert process.returncode == 0, (args, err)
        outputs.append((out, err))
    return outputs
