"""The submit regime (`pipeline bench --regimes submit`, issue 49) in its parts, at a tiny size:
a submit watched from its start on the session's workers (the moments it reports, read from the
database), with `submit-run` its run too, to its report; and the code of before checked out into
a worktree that its side's processes import.
The regime's own runs (20,000 filings, each code on its own database, Redis and workers, old
and new alternating) are its numbers in docs/benchmarks.md; this asserts nothing about speed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pipeline_dev.bench import submit
from pipeline_dev.bench.regimes import REGIMES
from pipeline_dev.synth_filings import write_filings

SUBMIT_RUN_TIMEOUT_S = 300.0
"""A bound, not a measure: three small filings' run on the session's workers takes seconds."""


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


@pytest.mark.usefixtures("workers")
def test_a_submit_run_is_watched_to_its_report(pipeline_env: dict[str, str], tmp_path: Path) -> None:
    assert "submit-run" in REGIMES
    files = tmp_path / "filings"
    write_filings(files, 3, seed=4, sizes=[4_000, 5_000, 6_000])

    found = submit.watch_submit(
        pipeline_env, files, pipeline_env["PIPELINE_DATABASE_URL"], run_timeout_s=SUBMIT_RUN_TIMEOUT_S
    )

    assert found["run_finished"] and found["run_status"] == "completed", found
    assert found["run_id"] and found["documents_at_finish"] == 3 and found["unfinished_at_finish"] == 0
    assert found["extracted_at_finish"] + found["failed_at_finish"] == 3
    assert found["run_wall_s"] is not None and found["run_wall_s"] >= found["first_extracted_stamped_s"]
    assert found["report_after_last_document_s"] is not None and found["report_after_last_document_s"] >= 0
    assert found["idle_s_during_run"] >= 0 and found["first_extracted_seen"]


def test_a_submit_run_reports_both_walls_new_over_old() -> None:
    def round_(code: str, wall_s: float, run_wall_s: float | None, unfinished: int = 0) -> dict[str, Any]:
        return {
            "code": code,
            "wall_s": wall_s,
            "cpu_s": 1.0,
            "first_taken_s": 1.0,
            "first_extracted_s": 2.0,
            "idle_s_during_submit": 0.0,
            "extracted_by_submit_end": 1,
            "run_wall_s": run_wall_s,
            "run_finished": run_wall_s is not None,
            "idle_s_during_run": 1.0,
            "extracted_at_finish": 10,
            "failed_at_finish": 0,
            "unfinished_at_finish": unfinished,
        }

    runs = [round_("old", 10.0, 100.0), round_("new", 3.0, 80.0), round_("new", 5.0, 90.0, 1)]
    new = submit.summary([r for r in runs if r["code"] == "new"])
    old = submit.summary([r for r in runs if r["code"] == "old"])
    assert new["run_wall_s"] == 85.0 and new["run_wall_s_worst"] == 90.0
    found = submit.run_ratios(runs, new, old)
    assert found["run_wall_ratio"] == 0.85 and found["lost"] == 1
    unfinished = submit.run_ratios([*runs, round_("old", 10.0, None)], new, old)
    assert unfinished["lost"] is None, "a run not finished in time: what it lost is not known"
    assert "run_wall_s" not in submit.summary([{k: v for k, v in runs[0].items() if "run" not in k}])


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
