"""A path that cannot name anything is refused with its reason, before a run is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from pipeline.core.errors import InputError
from pipeline.ingest.inputs import check_bases, fixed_part
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Run
from tests.conftest import run_cli


def test_a_glob_names_the_directories_before_its_first_wildcard() -> None:
    assert fixed_part("/data/inbox/*.txt") == "/data/inbox"
    assert fixed_part("/data/*/2024/*.txt") == "/data"
    assert fixed_part("*.txt") == "."
    assert fixed_part("/data/inbox") == "/data/inbox"


@pytest.mark.parametrize(
    "named",
    ["typo-inbox/*.txt", "typo-inbox/**/*.txt", "typo-inbox/10k.txt", "typo-inbox/"],
)
def test_a_path_under_a_missing_directory_is_refused_naming_both(tmp_path: Path, named: str) -> None:
    pattern = f"{tmp_path}/{named}"
    with pytest.raises(InputError) as refused:
        check_bases([str(tmp_path / "*.txt"), pattern])
    assert str(refused.value) == (
        f"{pattern}: the directory {tmp_path / 'typo-inbox'} does not exist; check the path (no run was started)"
    )


def test_a_file_named_as_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "inbox").write_text("a file, not a directory")
    with pytest.raises(InputError, match=r"inbox is not a directory"):
        check_bases([f"{tmp_path}/inbox/*.txt"])


def test_an_empty_directory_or_a_missing_file_in_an_existing_one_is_not_refused(tmp_path: Path) -> None:
    # Both are accounted for later: "nothing new" with --new-only, a `skipped` row otherwise.
    check_bases([f"{tmp_path}/*.txt", f"{tmp_path}/absent.txt", str(tmp_path), "relative.txt"])


def _runs(url: str) -> int:
    with session_scope(get_engine(url)) as session:
        return int(session.scalar(select(func.count()).select_from(Run)) or 0)


@pytest.mark.parametrize("new_only", [True, False], ids=["new-only", "all"])
def test_submit_of_a_mistyped_inbox_exits_2_naming_it_and_stores_no_run(
    pipeline_env: dict[str, str], tmp_path: Path, new_only: bool
) -> None:
    # As ops/crontab.example submits the nightly inbox: '/data/inbox/*.txt' --new-only.
    pattern = f"{tmp_path}/typo-inbox/*.txt"
    before = _runs(pipeline_env["PIPELINE_DATABASE_URL"])
    result = run_cli("submit", pattern, *(["--new-only"] if new_only else []), env=pipeline_env)
    assert result.returncode == 2, result.stderr
    assert f"{pattern}: the directory {tmp_path / 'typo-inbox'} does not exist" in result.stderr
    assert "nothing new" not in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""
    assert _runs(pipeline_env["PIPELINE_DATABASE_URL"]) == before


def test_submit_new_only_of_an_empty_inbox_is_nothing_new(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    result = run_cli("submit", f"{tmp_path}/*.txt", "--new-only", env=pipeline_env)
    assert result.returncode == 0, result.stderr
    assert "nothing new to submit" in result.stderr
