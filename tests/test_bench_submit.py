"""The submit regime (`pipeline bench --regimes submit`, issue 49) in its parts, at a tiny size:
a submit watched from its start on the session's workers (the moments it reports, read from the
database), and the code of before checked out into a worktree that its side's processes import.
The regime's own runs (20,000 filings, each code on its own database, Redis and workers, old
and new alternating) are its numbers in docs/benchmarks.md; this asserts nothing about speed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline_dev.bench import submit
from pipeline_dev.bench.regimes import REGIMES
from pipeline_dev.synth_filings import write_filings


@pytest.mark.usefixtures("workers")
def test_a_submit_is_watched_from_its_start_to_its_first_extraction(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    assert "submit" in REGIMES
    files = tmp_path / "filings"
    write_filings(files, 3, seed=3, sizes=[4_000, 6_000, 8_000])

    found = submit.watch_submit(pipeline_env, files, pipeline_env["PIPELINE_DATABASE_URL"])

    assert found["stored_by_submit_end"] == 3, "the poll reads this directory's documents alone"
    assert found["first_extracted_seen"] and found["polls"] > 1
    assert 0 < found["first_taken_s"] <= found["first_extracted_s"]
    assert found["first_taken_stamped_s"] is not None and found["first_extracted_stamped_s"] is not None
    assert found["wall_s"] > 0 and found["cpu_s"] > 0


@pytest.mark.skipif(shutil.which("git") is None or not (submit.REPO / ".git").exists(), reason="no git")
def test_the_side_of_before_imports_the_code_of_before() -> None:
    with submit.tree(submit.OLD_REVISION) as root:
        assert root is not None
        imported = submit.code_files({"PYTHONPATH": str(root), "PYTHONSAFEPATH": "1"})
        assert all(Path(path).is_relative_to(root) for path in imported.values()), imported
        assert "chord(header" in (root / "workers" / "canvas.py").read_text(), "the submit that sent a chord"
    assert not root.exists(), "the worktree is removed"


def test_the_goals_are_judged_on_the_worst_round() -> None:
    rounds = [
        {"wall_s": 10.0, "cpu_s": 4.0, "first_taken_s": 2.0, "first_extracted_s": 3.0},
        {"wall_s": 12.0, "cpu_s": 5.0, "first_taken_s": 4.0, "first_extracted_s": 6.0},
    ]
    for r in rounds:
        r |= {"idle_s_during_submit": 0.0, "extracted_by_submit_end": 1}
    found = submit.summary(rounds)
    assert found["wall_s"] == 11.0 and found["first_extracted_s_worst"] == 6.0
    never = {**rounds[0], "first_extracted_s": None}
    assert submit.summary([*rounds, never])["first_extracted_s_worst"] is None, "a round that never saw one"
