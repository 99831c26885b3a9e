"""`pipeline status` reads like a tool: a summary line, compact tables that fit 80 columns,
failure reasons grouped and counted, the structured-output mode and how it was found, the run's
mode and who chose it, and `--json` in the shape docs/status.md describes."""

from __future__ import annotations

import io
import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from pipeline.cli.status_page import StatusPage
from pipeline.cli.status_tables import runs_table
from pipeline.cli.status_view import render
from pipeline.core.settings import Settings, get_settings
from pipeline.llm.prompts import STRUCTURED_MODES
from pipeline.runs.failures import FailureGroup, group_failures
from pipeline.runs.mode import choose_mode
from pipeline.runs.status import DocumentGrounding, RunStatusView
from pipeline.runtime.embedded import Child
from pipeline_dev.synth_filings import generate_filing, write_filings
from tests.conftest import SESSION_API_KEY, run_cli

ROOT = Path(__file__).resolve().parent.parent

NOW = datetime(2026, 12, 2, 1, 30, tzinfo=UTC)


@pytest.fixture
def no_mode_in_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("PIPELINE_LLM_MODE", raising=False)
    monkeypatch.chdir("/")  # no .env either
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("no_mode_in_environment")
def test_the_mode_nobody_asked_for_is_called_the_default() -> None:
    choice = choose_mode(get_settings(), None, 60.0, NOW)
    assert (choice.mode, choice.reason) == ("sync", "default: neither --mode nor PIPELINE_LLM_MODE was given")


@pytest.mark.usefixtures("no_mode_in_environment")
def test_a_mode_asked_for_names_who_asked() -> None:
    by_option = get_settings().model_copy(update={"llm_mode": "batch"})  # what `--mode batch` does
    assert choose_mode(by_option, None, 60.0, NOW).reason == "asked for: --mode batch"


def test_a_mode_from_the_environment_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_LLM_MODE", "sync")
    get_settings.cache_clear()
    try:
        assert choose_mode(Settings(), None, 60.0, NOW).reason == "asked for: PIPELINE_LLM_MODE=sync"
    finally:
        get_settings.cache_clear()


# Failure reasons, grouped


def test_a_documents_error_is_grouped_by_its_reason_not_its_detail() -> None:
    rows = [
        ("failed", "/in/a.txt", "answer did not validate after repair: company: Field required"),
        (
            "failed",
            "/in/b.txt",
            "answer did not validate after repair: fiscal_year: Input should be a valid integer",
        ),
        ("failed", "/in/c.txt", "gave up after 4 attempts: UpstreamUnavailable: 503 from the provider"),
        ("failed", "/in/d.txt", "gave up after 4 attempts: UpstreamUnavailable: connection refused"),
        ("failed", "/in/e.txt", "gave up after 4 attempts: OperationalError: server closed the connection"),
        ("failed", "/in/f.txt", "budget: the run spent $2.0100 of its $2.0000"),
        ("skipped", "/in/g.txt", "empty file"),
        ("failed", "/in/h.txt", None),
    ]
    groups = {(g.status, g.reason): g for g in group_failures(rows)}
    assert {key: g.documents for key, g in groups.items()} == {
        ("failed", "answer did not validate after repair"): 2,
        ("failed", "gave up after retries: UpstreamUnavailable"): 2,
        ("failed", "gave up after retries: OperationalError"): 1,
        ("failed", "budget"): 1,
        ("skipped", "empty file"): 1,
        ("failed", "no reason recorded"): 1,
    }
    first = group_failures(rows)[0]
    assert first.documents == 2 and first.paths == ["/in/a.txt", "/in/b.txt"]
    assert first.example == "answer did not validate after repair: company: Field required"


# The text view at 80 columns

LONG_MODEL = "bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0"


def _busy_page() -> StatusPage:
    """A night's run as wide as they come: every row and table, big numbers, long names."""
    view = RunStatusView(
        run_id="81bdbd5cb4c74438b9f4f2bae257a7dc",
        name="nightly-2026-12-02-filings-from-the-inbox",
        status="failed",
        query="Q4 revenue and the top risk factors across these filings",
        model=LONG_MODEL,
        simulated=False,
        created_at="2026-12-02T01:30:00+00:00",
        finished_at="2026-12-02T03:41:07+00:00",
        elapsed_s=7867.0,
        documents={"extracted": 9_870, "failed": 120, "skipped": 10},
        documents_total=10_000,
        documents_done=10_000,
        llm_calls=605_164,
        llm_calls_failed=2_236,
        prompt_tokens=912_345_678,
        completion_tokens=98_765_432,
        has_report=True,
        cost_usd=12_345.6789,
        unpriced_calls=3,
        budget_usd=20_000.0,
        error="120 of 10000 documents failed, over the 1% threshold",
        chunks_total=301_000,
        chunks_done=300_880,
        quotes_total=120_000,
        quotes_grounded=119_000,
        grounding_rate=119_000 / 120_000,
        injection_flagged=2,
        reclaimed={"worker-a:123:abcdef": 12, "worker-b:456:fedcba": 3},
        mode="batch",
        mode_reason="auto: the deadline leaves 3h10m beyond the 1h02m the synchronous path needs "
        "(a batch needs at least 2h00m)",
        deadline="2026-12-02T06:00:00+00:00",
        batch_calls=300_000,
        batch_cost_usd=6_000.25,
        batch_saved_usd=6_000.25,
        batches=[
            {
                "batch": f"batch_67d0c1f8e2b7a4c3e9f0a1b2c3d4e5f6{i}",
                "status": "completed",
                "requests": 50_000,
                "completed": 49_990,
                "failed": 10,
            }
            for i in range(3)
        ],
    )
    deep = "/srv/filings/inbox/2026/12/02/a-very-long-company-name-holdings-incorporated-2026-10k.txt"
    failures = [
        FailureGroup("failed", "gave up after retries: UpstreamUnavailable", 80, "x", [deep, deep, deep]),
        FailureGroup("failed", "the endpoint refused the API key (PIPELINE_LLM_API_KEY)", 30, "x", [deep]),
        FailureGroup("failed", "answer did not validate after repair", 10, "x", [deep]),
        FailureGroup(
            "skipped", "estimated 1,234,567 tokens, over PIPELINE_MAX_DOCUMENT_TOKENS", 10, "", [deep]
        ),
    ]
    grounding = [DocumentGrounding(deep, 120, 60 + i, (60 + i) / 120, i % 2 == 0, i == 0) for i in range(20)]
    scope = {
        "rpm": 10_000,
        "tpm": 30_000_000,
        "max_inflight": 256,
        "learned_rpm": 10_000,
        "learned_tpm": 30_000_000,
        "pacing": True,
        "burst_s": 1.0,
        "effective_rpm": 9_000,
        "effective_tpm": 27_000_000,
        "factor": 0.9,
        "window_s": 60.0,
        "requests_in_window": 8_999,
        "tokens_in_window": 26_999_999,
        "inflight": 256,
        "paused_for_s": 12.5,
        "structured_output": "json_object_schema (found by auto)",
        "structured_output_mode": "json_object_schema",
        "structured_output_how": "found by auto",
    }
    limiter = [
        {**scope, "model": model, "key_slot": slot, "limits_from": source}
        for model, source in (
            (LONG_MODEL, "configured, lowered to the provider's headers"),
            ("gpt-4o", "none"),
        )
        for slot in range(2)
    ]
    workers = [
        {"owner": f"host-{i}:1234{i}:abcdef", "name": f"pipeline-1234{i}@worker-host-{i}", "held": 32}
        for i in range(8)
    ]
    return StatusPage(
        view=view,
        failures=failures,
        grounding=grounding,
        limiter=limiter,
        workers=workers,
        broker_problem=None,
        inbox_warning="PIPELINE_INBOX=/data/inbox is set here but no live worker can read it",
        notes=[("outage", "the provider refused every call for 5m00s (circuit open since 02:10:00)")],
    )


def _rendered(shown: StatusPage | Table, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(render(shown) if isinstance(shown, StatusPage) else shown)
    return console.export_text()


def test_every_line_fits_80_columns_and_no_header_is_cut() -> None:
    page = _busy_page()
    text = _rendered(page)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)
    assert lines[0] == "run 81bdbd5c FAILED in 2h11m: 9,870/10,000 extracted, 120 failed, 10 skipped"
    assert "…" not in text, [line for line in lines if "…" in line]
    tables = [part for part in render(page).renderables if isinstance(part, Table) and part.show_header]
    assert len(tables) == 4, "why, grounding, batches, limiter"
    for table in tables:
        headers = [str(column.header) for column in table.columns]
        header_line = _rendered(table).splitlines()[0]
        assert re.fullmatch(r"\s*" + r"\s+".join(map(re.escape, headers)) + r"\s*", header_line), header_line


def test_the_runs_list_fits_80_columns_with_ids_every_command_takes() -> None:
    busy = _busy_page().view
    done = {"extracted": 3}
    quick = replace(busy, run_id="0f" * 16, name=None, status="completed", elapsed_s=41.0, documents=done)
    text = _rendered(runs_table([busy, quick]))
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "…" not in text, text
    busy_row = r"^81bdbd5c +FAILED +9,870/10,000 +120 +2026-12-02 01:30 +2h11m +nightly-2026"
    assert re.search(busy_row, text, re.M), text
    assert re.search(r"^0f0f0f0f +completed +3/10,000 +2026-12-02 01:30 +41 s *$", text, re.M), text


def test_the_view_is_a_summary_and_short_rows_not_a_dump_of_fields() -> None:
    text = _rendered(_busy_page())
    assert "605,164" in text and "912,345,678 in" in text, "numbers carry separators"
    for raw in ("{", "None", "False", "True", "_s ", "documents_total", "mode_reason"):
        assert raw not in text, raw
    assert "5 of 20 documents below 100 %" in text, "five documents' grounding, not twenty"
    assert "why 130 documents were not extracted" in text
    assert re.search(r"^ +80 +failed: gave up after retries: UpstreamUnavailable *$", text, re.MULTILINE)
    assert "outage" in text and "circuit open" in text, "another part's rows are shown"


def test_a_good_run_shows_no_failure_or_grounding_table() -> None:
    page = _busy_page()
    page.view.status, page.view.error = "completed", None
    page.failures = []
    page.grounding = [
        replace(
            d, quotes_grounded=d.quotes_total, grounding_rate=1.0, revenue_grounded=True, injection_flag=False
        )
        for d in page.grounding
    ]
    text = _rendered(page)
    assert "were not extracted" not in text and "quotes found in the filing:" not in text
    assert text.splitlines()[0].startswith("run 81bdbd5c completed in 2h11m: ")


# Real runs: a good and a failed one through the session's workers

DOCS_JSON_FIELDS = re.compile(r"^\| `([a-z_]+)` \|", re.MULTILINE)
COLUMNS_80 = {"COLUMNS": "80"}


@dataclass(frozen=True)
class Submitted:
    run_id: str
    result: subprocess.CompletedProcess[str]


def _submit(env: dict[str, str], files: Path) -> Submitted:
    result = run_cli("submit", str(files), "--wait", env=env)
    return Submitted(result.stdout.strip().splitlines()[-1], result)


@pytest.fixture(scope="module")
def good_run(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path_factory: pytest.TempPathFactory
) -> Submitted:
    files = tmp_path_factory.mktemp("good")
    write_filings(files, 2, seed=291, sizes=[12_000, 12_000])
    submitted = _submit(pipeline_env, files)
    assert submitted.result.returncode == 0, submitted.result.stderr
    return submitted


@pytest.fixture(scope="module")
def failed_run(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path_factory: pytest.TempPathFactory
) -> Submitted:
    """One filing extracted, two whose answers never validate, one the provider refuses (401)."""
    files = tmp_path_factory.mktemp("failed")
    for index, marker in enumerate(["", "[[sim:invalid]]", "[[sim:invalid]]", "[[sim:badkey]]"]):
        text, truth = generate_filing(300 + index, seed=293, target_bytes=12_000)
        (files / truth.filename).write_text(f"{text}\n{marker}\n", encoding="utf-8")
    submitted = _submit(pipeline_env, files)
    assert submitted.result.returncode == 1, submitted.result.stderr
    return submitted


def test_submit_wait_ends_with_the_summary_the_reasons_and_the_reports_path(failed_run: Submitted) -> None:
    said = failed_run.result.stderr.strip().splitlines()
    summary = said.index(
        next(line for line in said if line.startswith(f"run {failed_run.run_id[:8]} FAILED in "))
    )
    assert said[summary].endswith(": 1 of 4 documents extracted, 3 failed")
    reasons = said[summary + 2 : summary + 4]
    assert reasons[0].startswith("  2 failed: answer did not validate after repair (e.g. ")
    assert reasons[1].startswith("  1 failed: the endpoint refused the API key (PIPELINE_LLM_API_KEY) (e.g. ")
    assert said[summary + 4] == "run failed: 3 of 4 documents failed, over the 10% threshold"
    short = failed_run.run_id[:8]
    found = re.fullmatch(
        rf"report: (\S+\.md) \(and \.json, -documents\.csv; the page: pipeline report {short} -o {short}\.html\)",
        said[-1],
    )
    assert found, said[-1]
    report = Path(found.group(1))
    assert report.name == f"{failed_run.run_id}.md" and "RUN FAILED" in report.read_text()
    assert json.loads(report.with_suffix(".json").read_text())["run_id"] == failed_run.run_id
    table = report.with_name(f"{failed_run.run_id}-documents.csv").read_text().splitlines()
    assert table[0].startswith("path,status,error,") and len(table) == 1 + 4, "a row per document"


def test_status_of_a_good_run_in_80_columns(pipeline_env: dict[str, str], good_run: Submitted) -> None:
    shown = run_cli("status", good_run.run_id, env={**pipeline_env, **COLUMNS_80})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert re.fullmatch(
        rf"run {good_run.run_id[:8]} completed in [\d.]+ s: 2 of 2 documents extracted", lines[0]
    )
    assert max(len(line) for line in lines) <= 80
    grid = lines[2 : lines.index("", 2)]  # the rows after the summary, up to the first table
    rows = {line.split("  ", 1)[0]: line.split("  ", 1)[1].strip() for line in grid if line[:1].strip()}
    assert rows["documents"] == "2 extracted (of 2)"
    assert rows["mode"] == "sync, default: neither --mode nor PIPELINE_LLM_MODE was given"
    assert re.fullmatch(
        r"sim-1, structured output \S+ \((auto: never refused|found by auto)\)", rows["model"]
    )
    assert rows["report"] == f"pipeline report {good_run.run_id[:8]} -o {good_run.run_id[:8]}.html"
    assert "were not extracted" not in shown.stdout
    for raw in ("None", "False", "{", "…"):
        assert raw not in shown.stdout, raw


def test_status_of_a_failed_run_counts_its_reasons(
    pipeline_env: dict[str, str], failed_run: Submitted
) -> None:
    shown = run_cli("status", failed_run.run_id, env={**pipeline_env, **COLUMNS_80})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"run {failed_run.run_id[:8]} FAILED in ")
    assert max(len(line) for line in lines) <= 80
    assert "why 3 documents were not extracted" in shown.stdout
    assert re.search(r"^ +2 +failed: answer did not validate after repair *$", shown.stdout, re.MULTILINE)
    assert re.search(
        r"^ +1 +failed: the endpoint refused the API key \(PIPELINE_LLM_API_KEY\) *$",
        shown.stdout,
        re.MULTILINE,
    )
    assert re.search(
        r"^error +3 of 4 documents failed, over the 10% threshold *$", shown.stdout, re.MULTILINE
    )


def test_status_json_has_every_documented_field(pipeline_env: dict[str, str], good_run: Submitted) -> None:
    shown = run_cli("status", good_run.run_id, "--json", env=pipeline_env)
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    documented = DOCS_JSON_FIELDS.findall((ROOT / "docs" / "status.md").read_text())
    assert len(documented) > 40 and set(documented) == set(found), set(documented) ^ set(found)
    assert found["version"] == 1 and found["summary"].startswith(f"run {good_run.run_id[:8]} completed in ")
    assert (found["run_id"], found["documents"], found["failures"]) == (good_run.run_id, {"extracted": 2}, [])
    (structured,) = found["structured_output"]
    assert structured["model"] == "sim-1" and structured["mode"] in STRUCTURED_MODES and structured["how"]
    assert found["mode_reason"] == "default: neither --mode nor PIPELINE_LLM_MODE was given"
    assert isinstance(found["workers"], list) and isinstance(found["limiter"], list)


def test_status_json_of_a_failed_run_groups_its_failures(
    pipeline_env: dict[str, str], failed_run: Submitted
) -> None:
    found = json.loads(run_cli("status", failed_run.run_id, "--json", env=pipeline_env).stdout)
    assert found["status"] == "failed" and found["documents"] == {"extracted": 1, "failed": 3}
    groups = [(g["status"], g["reason"], g["documents"], len(g["paths"])) for g in found["failures"]]
    assert groups == [
        ("failed", "answer did not validate after repair", 2, 2),
        ("failed", "the endpoint refused the API key (PIPELINE_LLM_API_KEY)", 1, 1),
    ]
    assert found["failures"][0]["example"].startswith("answer did not validate after repair: ")
    assert SESSION_API_KEY not in json.dumps(found)
