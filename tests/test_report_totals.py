"""One run, one set of totals: `status --json`, the report's Markdown and JSON header and its
HTML page show the calls and tokens counted from the run's `llm_calls` rows, also when a hedged
copy of the final synthesis ends after the report was written."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from pipeline.llm.prompts import SYNTHESIZE_SYSTEM
from pipeline.reporting.render import cached_note, late_calls_note
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import LLMCall, Report
from pipeline_dev.synth_filings import write_filings
from tests.conftest import eventually, run_cli

pytestmark = pytest.mark.usefixtures("workers")

WAIT_S = 60.0
POLL_S = 0.2


def _rows(engine: Engine, run_id: str) -> tuple[int, int, float]:
    """The direct count: the run's llm_calls rows, their tokens and their cost."""
    with session_scope(engine) as session:
        calls, prompt, completion, cost = session.execute(
            select(
                func.count(LLMCall.id),
                func.coalesce(func.sum(LLMCall.prompt_tokens), 0),
                func.coalesce(func.sum(LLMCall.completion_tokens), 0),
                func.coalesce(func.sum(LLMCall.cost_usd), 0.0),
            ).where(LLMCall.run_id == run_id)
        ).one()
    return int(calls), int(prompt) + int(completion), round(float(cost), 6)


def _synthesis_rows(engine: Engine, run_id: str) -> int:
    with session_scope(engine) as session:
        return int(
            session.scalar(
                select(func.count()).where(LLMCall.run_id == run_id, LLMCall.stage == "synthesize")
            )
            or 0
        )


def _synthesis_requests(record: Path, query: str) -> int:
    """The synthesis requests of the run (its question in them) the simulator received."""
    with record.open(encoding="utf-8") as lines:
        requests = [json.loads(line) for line in lines if query in line]
    return sum(
        1
        for r in requests
        if r["messages"]
        and r["messages"][0]["content"] == SYNTHESIZE_SYSTEM
        and query in r["messages"][-1]["content"]
    )


def _report_json(engine: Engine, run_id: str) -> dict[str, Any]:
    with session_scope(engine) as session:
        return dict(session.scalar(select(Report.json).where(Report.run_id == run_id)) or {})


def test_status_report_and_page_show_the_calls_the_database_holds(
    pipeline_env: dict[str, str], sim_record: Path, tmp_path: Path
) -> None:
    """`[[sim:slowcopy]]` in the question: the final synthesis's second copy is answered 1.5 s
    after the first, so its call is recorded after the report was first written (the 137 of
    138 calls the report's header said)."""
    write_filings(tmp_path, 2, seed=61, sizes=[21_000] * 2)
    query = f"Revenue and risks {uuid.uuid4().hex} [[sim:slowcopy]]?"
    submitted = run_cli("submit", str(tmp_path / "*.txt"), "--query", query, "--wait", env=pipeline_env)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip().splitlines()[-1]
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    first = _report_json(engine, run_id)["totals"]

    # Every synthesis request the simulator had (both copies of the final one) is recorded ...
    eventually(
        "the synthesis calls the simulator answered were never all recorded",
        lambda: _synthesis_rows(engine, run_id) == _synthesis_requests(sim_record, query) >= 2,
    )
    # ... and the report, rewritten once its late copy ended, names no copy still running.
    eventually(
        "the report still names a synthesis copy running",
        lambda: _report_json(engine, run_id)["totals"].get("synthesis_copies_running", 0) == 0,
    )
    calls, tokens, cost = _rows(engine, run_id)

    # Written before the slower copy ended, the first report said so (or it was rewritten already).
    assert first["llm_calls"] == calls or first.get("synthesis_copies_running") == 1, (
        first["llm_calls"],
        calls,
    )

    view = json.loads(run_cli("status", run_id, "--json", env=pipeline_env).stdout)
    assert (view["llm_calls"], view["prompt_tokens"] + view["completion_tokens"]) == (calls, tokens)
    assert view["cost_usd"] == cost

    totals = json.loads(run_cli("report", run_id, "--format", "json", env=pipeline_env).stdout)["totals"]
    assert (totals["llm_calls"], totals["tokens"], totals["cost_usd"]) == (calls, tokens, cost)
    cached = cached_note(view["cached_tokens"])  # the synthesis copies share their prompt
    assert totals["cached_tokens"] == view["cached_tokens"]

    markdown = run_cli("report", run_id, env=pipeline_env).stdout
    assert f" · {calls} LLM calls, {tokens:,} tokens{cached} · ${cost:.4f}" in markdown
    assert late_calls_note(1) not in markdown

    page = tmp_path / "report.html"
    assert run_cli("report", run_id, "--format", "html", "-o", str(page), env=pipeline_env).returncode == 0
    html = page.read_text(encoding="utf-8")
    assert f" · {calls} LLM calls, {tokens:,} tokens{cached} · " in html
    assert "recorded after the report" not in html
    assert f"{calls:,} calls sent, " in html  # the calls section's own count (held calls apart)


def test_calls_an_open_circuit_held_are_counted_apart_not_as_sent_or_failed(engine: Engine) -> None:
    """A held call (`circuit_open`) was never sent: counting it as a failed call made `status`
    show an outage's held calls as failures, and `--wait` say every call was failing."""
    from pipeline.core.constants import CALL_HELD
    from pipeline.storage import intake, llm_calls

    run_id = uuid.uuid4().hex
    row = {
        "document_id": None,
        "chunk_idx": None,
        "stage": "extract",
        "model": "m",
        "prompt_tokens": 10,
        "cost_usd": None,
    }
    with session_scope(engine) as session:
        intake.create_run(
            session, run_id, name=None, query="q", model="m", prompt_version="v", simulated=True
        )
        rows = [
            {**row, "run_id": run_id, "status": status, "completion_tokens": 5 if status == "ok" else 0}
            for status in ("ok", "ok", "unavailable", CALL_HELD, CALL_HELD, CALL_HELD)
        ]
        llm_calls.insert_calls(session, run_id, rows)
        totals = llm_calls.call_totals(session, run_id)
    assert (totals.calls, totals.failed_calls, totals.held_calls) == (3, 1, 3)
