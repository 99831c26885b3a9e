"""The command line explains itself: `pipeline --help` lists the commands in the order of the
work, every option of every command says what it does, and the small traps are gone (`report
-o out.html` writes the page, `resume` without RUN takes the newest run, as `status` does)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.cli.base import HELP_SECTIONS, workflow_order
from pipeline.runtime.embedded import Child
from pipeline_dev.synth_filings import write_filings
from tests.conftest import run_cli


def _commands(group: click.Group, path: str) -> Iterator[tuple[str, click.Command]]:
    ctx = click.Context(group, info_name=path)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield f"{path} {name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{path} {name}")


def test_help_lists_the_commands_in_the_order_of_the_work() -> None:
    shown = CliRunner().invoke(main, ["--help"], prog_name="pipeline", terminal_width=80)
    assert shown.exit_code == 0, shown.output
    rows = re.findall(r"^  ([a-z]+) +(.+)$", shown.output, re.MULTILINE)
    listed = [name for name, _ in rows]
    assert listed[:4] == ["run", "submit", "status", "report"], listed
    assert listed == workflow_order(listed), "sections in HELP_SECTIONS' order, unknown commands last"
    assert set(listed) == set(main.commands), "every command is listed once"
    headings = re.findall(r"^(\S[^:\n]*):$", shown.output, re.MULTILINE)
    assert headings[1:3] == [title for title, _ in HELP_SECTIONS[:2]], headings
    assert not [name for name, said in rows if said.endswith("...")], "each first sentence fits its line"


def test_a_command_not_in_the_workflow_is_listed_last() -> None:
    assert workflow_order(["zap", "bench", "status", "aardvark", "run"]) == [
        "run",
        "status",
        "bench",
        "aardvark",
        "zap",
    ]


def test_every_option_of_every_command_has_help() -> None:
    missing = [
        f"{path} {'/'.join(param.opts)}"
        for path, command in [("pipeline", main), *_commands(main, "pipeline")]
        for param in command.get_params(click.Context(command))
        if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()
    ]
    assert not missing, missing


def test_every_command_says_what_it_does() -> None:
    assert not [path for path, command in _commands(main, "pipeline") if not (command.help or "").strip()]


def test_beat_help_names_what_beat_sends() -> None:
    shown = CliRunner().invoke(main, ["beat", "--help"], terminal_width=100)
    text = " ".join(shown.output.split())
    assert "nightly submit" in text and "PIPELINE_INBOX" in text and "watchdog" in text


@pytest.fixture(scope="module")
def finished_run(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path_factory: pytest.TempPathFactory
) -> str:
    files = tmp_path_factory.mktemp("filings")
    write_filings(files, 1, seed=307, sizes=[10_000])
    result = run_cli("submit", str(files), "--wait", env=pipeline_env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("name", "starts"),
    [("out.html", "<!doctype html"), ("out.HTM", "<!doctype html"), ("out.md", "# "), ("out.json", "{")],
)
def test_report_o_writes_the_format_its_suffix_names(
    pipeline_env: dict[str, str], finished_run: str, tmp_path: Path, name: str, starts: str
) -> None:
    out = tmp_path / name
    written = run_cli("report", finished_run, "-o", str(out), env=pipeline_env)
    assert written.returncode == 0, written.stderr
    text = out.read_text(encoding="utf-8")
    assert text.lower().startswith(starts), text[:80]
    if name.endswith(".json"):
        assert json.loads(text)["run_id"] == finished_run


def test_format_named_overrides_the_suffix(
    pipeline_env: dict[str, str], finished_run: str, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    assert run_cli("report", finished_run, "--format", "md", "-o", str(out), env=pipeline_env).returncode == 0
    assert out.read_text(encoding="utf-8").startswith("# ")


def test_resume_without_run_takes_the_newest(pipeline_env: dict[str, str], finished_run: str) -> None:
    resumed = run_cli("resume", env=pipeline_env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {finished_run} has its report: nothing to resume" in resumed.stderr
