"""Cost per call, document and run from the price table; a run's budget; size caps. The
README's SQL: tests/test_readme_sql.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select, text

from pipeline.core.cost import Price, call_cost, parse_prices
from pipeline.core.settings import Settings
from pipeline.ingest.producer import prepare_run
from pipeline.runtime.embedded import Child
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, LLMCall, Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import PRICES, run_cli

"""The session stack's worker threads (tests/conftest.py)."""


def test_prices_parse_and_price_calls() -> None:
    prices = parse_prices("gpt-4o-mini:0.15/0.60, gpt-4o:2.5/10")
    assert prices == {"gpt-4o-mini": Price(0.15, 0.60), "gpt-4o": Price(2.5, 10.0)}
    assert call_cost(prices, "gpt-4o", 1_000_000, 100_000) == pytest.approx(3.5)
    assert call_cost(prices, "unknown-model", 10, 10) is None
    for bad in ("gpt-4o", "gpt-4o:1", "gpt-4o:x/1", ":1/2", "m:-1/2"):
        with pytest.raises(ValueError, match="PIPELINE_LLM_PRICES"):
            parse_prices(bad)


@pytest.fixture
def priced(pipeline_env: dict[str, str], workers: list[Child]) -> dict[str, str]:
    """The session's workers, which price calls with PRICES."""
    return pipeline_env


def test_every_call_document_and_run_has_its_cost(priced: dict[str, str], tmp_path: Path) -> None:
    write_filings(tmp_path, 3, seed=81, sizes=[25_000] * 3)
    result = run_cli("submit", str(tmp_path), "--wait", "--fresh", env=priced)
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    engine = get_engine(priced["PIPELINE_DATABASE_URL"])
    price = parse_prices(PRICES)["sim-1"]
    with session_scope(engine) as session:
        calls = list(session.scalars(select(LLMCall).where(LLMCall.run_id == run_id)))
        for call in calls:
            assert call.cost_usd == pytest.approx(
                price.of(call.prompt_tokens, call.completion_tokens, call.cached_tokens)
            )
        total = sum(c.cost_usd or 0.0 for c in calls)
        run = session.get(Run, run_id)
        assert run is not None and run.cost_usd == pytest.approx(total) and total > 0
        view = session.execute(
            text("select cost_usd, calls, unpriced_calls from run_costs where run_id = :run"), {"run": run_id}
        ).one()
        assert view.cost_usd == pytest.approx(total) and view.calls == len(calls) and view.unpriced_calls == 0
        per_document = session.execute(
            text("select sum(cost_usd) from document_costs where run_id = :run"), {"run": run_id}
        ).scalar()
        synthesis = sum(c.cost_usd or 0.0 for c in calls if c.document_id is None)
        assert per_document == pytest.approx(total - synthesis)
    status = json.loads(run_cli("status", run_id, "--json", env=priced).stdout)
    assert status["cost_usd"] == pytest.approx(total, rel=1e-6) and status["unpriced_calls"] == 0
    shown = run_cli("status", run_id, env=priced)
    assert f"${total:,.4f}" in shown.stdout + shown.stderr


def test_a_spent_budget_stops_new_calls_and_fails_the_rest_with_budget(
    priced: dict[str, str], tmp_path: Path
) -> None:
    # More documents than the stack has threads (two workers of four), two chunks each.
    write_filings(tmp_path, 12, seed=83, sizes=[25_000] * 12)
    price = parse_prices(PRICES)["sim-1"]
    budget = 2 * price.of(6_000, 1_500)  # two extraction calls at their largest: about three made
    env = {**priced, "PIPELINE_RUN_BUDGET_USD": f"{budget:.6f}"}
    result = run_cli("submit", str(tmp_path), "--wait", "--fresh", env=env)
    assert result.returncode == 1, "too many documents failed: the run ends failed"
    run_id = result.stdout.strip().splitlines()[-1]
    engine = get_engine(priced["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        docs = list(session.scalars(select(Document).where(Document.run_id == run_id)))
        failed = [d for d in docs if d.status == "failed"]
        assert failed and all((d.error or "").startswith("budget:") for d in failed)
        assert {d.status for d in docs} <= {"extracted", "failed"}
        run = session.get(Run, run_id)
        assert run is not None and run.status == "failed" and run.budget_usd == pytest.approx(budget)
        # Each call held its largest cost (prompt and max_tokens) before it went (issue 47): the
        # run spent at most its budget, though eight threads asked at once (the 24 chunks
        # unbudgeted would cost about seven times the budget); a call that fits what is left
        # (the report's synthesis, smaller than an extraction) may still go.
        assert 0 < run.cost_usd <= budget
    report = run_cli("report", run_id, env=priced)
    assert report.returncode == 0 and "budget" in report.stdout


def test_token_caps_skip_documents_with_the_reason(pipeline_env: dict[str, str], tmp_path: Path) -> None:
    write_filings(tmp_path, 3, seed=85, sizes=[20_000, 20_000, 60_000])
    url = pipeline_env["PIPELINE_DATABASE_URL"]
    settings = Settings(_env_file=None, database_url=url, max_document_tokens=10_000, max_run_tokens=6_000)  # type: ignore[call-arg]
    plan = prepare_run(get_engine(url), settings, [str(tmp_path)])
    reasons = sorted(reason for _, reason in plan.rejected)
    assert (
        len(plan.document_ids) == 1 and 0 < plan.tokens <= 6_000
    )  # exact counts: about 3,900 a 20 KB filing
    assert any("over the 10,000-token document cap" in r for r in reasons)
    assert any("the run's 6,000-token cap is reached" in r for r in reasons)
