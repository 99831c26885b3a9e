"""The filing's own XBRL as a second witness, end to end: inline-XBRL 10-Ks answered by a model that
misreads figures (the simulator changes half of them), through real workers.

Each filing's total-revenue fact is read at submit and stored (`xbrl_facts`); a revenue the model
misread disagrees with it and is lowered under the escalation threshold, a right one agrees and is
raised; the `revenue_checks` view and docs/querying.md's query list the disagreements; status says
how many of each; `pipeline eval --truth-from-xbrl` scores the run with no hand labels and names
the filing it cannot score.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from pipeline.runtime.embedded import Child
from pipeline.storage.db import get_engine, session_scope
from pipeline_dev.bench.procs import sim_configure
from pipeline_dev.synth_edgar import write_example
from tests.conftest import run_cli

DOCS = Path(__file__).resolve().parents[1] / "docs"
FILINGS = 8


@pytest.fixture(scope="module")
def run(
    pipeline_env: dict[str, str], workers: list[Child], sim_url: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    inbox = tmp_path_factory.mktemp("xbrl")
    for index in range(FILINGS):
        write_example(inbox, 40 + index, "htm", seed=11, target_bytes=20_000)
    (inbox / "plain-10k.txt").write_text(
        "FORM 10-K\nItem 7. Management's Discussion and Analysis\nTotal revenue was $5.0 million.\n"
    )
    sim_configure(sim_url, wrong_figure_rate=0.5)
    try:
        submitted = run_cli("submit", str(inbox), "--name", "xbrl", "--fresh", "--wait", env=pipeline_env)
    finally:
        sim_configure(sim_url, wrong_figure_rate=0.0)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip().splitlines()[-1]
    with session_scope(get_engine(pipeline_env["PIPELINE_DATABASE_URL"])) as session:
        rows = [
            dict(r._mapping)
            for r in session.execute(text("select * from revenue_checks where run_id = :r"), {"r": run_id})
        ]
    return {"id": run_id, "env": pipeline_env, "rows": rows}


def test_each_filings_revenue_fact_is_stored_with_its_concept_and_context(run: dict[str, Any]) -> None:
    facts = [r for r in run["rows"] if r["xbrl_revenue_usd"] is not None]
    assert len(facts) == FILINGS
    assert {r["xbrl_concept"] for r in facts} == {"us-gaap:Revenues"} and all(
        r["xbrl_context"] for r in facts
    )
    (plain,) = [r for r in run["rows"] if r["path"].endswith("plain-10k.txt")]
    assert plain["verdict"] == "no fact" and plain["why"] == "no inline XBRL in the filing"


def test_misread_revenues_are_lowered_and_right_ones_raised(run: dict[str, Any]) -> None:
    verdicts = {r["verdict"] for r in run["rows"] if r["xbrl_revenue_usd"] is not None}
    assert verdicts == {"agrees", "differs"}, "the simulator misread some figures and not others"
    differs = [r for r in run["rows"] if r["verdict"] == "differs"]
    agrees = [r for r in run["rows"] if r["verdict"] == "agrees"]
    assert all(r["revenue_confidence"] < 0.5 for r in differs), "under the escalation threshold"
    assert all(r["revenue_confidence"] >= 0.8 for r in agrees)
    assert all(r["relative_difference"] > 0.005 for r in differs)


def test_the_documented_query_lists_the_disagreements_and_status_counts_them(run: dict[str, Any]) -> None:
    page = (DOCS / "querying.md").read_text(encoding="utf-8")
    query = re.search(r"<!-- disagreements -->\s*```sql\n(.*?)```", page, re.S)
    assert query, "docs/querying.md keeps the disagreement query under its marker"
    with session_scope(get_engine(run["env"]["PIPELINE_DATABASE_URL"])) as session:
        listed = session.execute(
            text(query.group(1).replace(":'run'", ":run_id")), {"run_id": run["id"]}
        ).all()
    assert sorted(r.path for r in listed) == sorted(
        r["path"] for r in run["rows"] if r["verdict"] == "differs"
    )
    status = run_cli("status", run["id"], "--json", env=run["env"])
    counted = json.loads(status.stdout)["confidence"]["xbrl_revenue"]
    assert counted["differs"] == len(listed) and counted["agrees"] + counted["differs"] == FILINGS
    shown = run_cli("status", run["id"], env=run["env"]).stdout
    assert f"{counted['agrees']} agree (raised), {counted['differs']} differ" in " ".join(shown.split())


def test_eval_scores_the_run_against_the_filings_own_facts_and_names_what_it_cannot(
    run: dict[str, Any], tmp_path: Path
) -> None:
    saved = tmp_path / "truth.json"
    result = run_cli(
        "eval", run["id"], "--truth-from-xbrl", "--save-truth", str(saved), "--json", env=run["env"]
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    agrees = sum(r["verdict"] == "agrees" for r in run["rows"])
    assert data["overall"]["revenue"] == pytest.approx(agrees / FILINGS, abs=0.01)
    assert data["not_scored_against_xbrl"] == [
        {"filename": "plain-10k.txt", "reason": "no inline XBRL in the filing"}
    ]
    assert len(json.loads(saved.read_text())["filings"]) == FILINGS
    both = run_cli("eval", run["id"], env=run["env"])
    assert both.returncode == 2 and "--truth-from-xbrl" in both.stdout + both.stderr
