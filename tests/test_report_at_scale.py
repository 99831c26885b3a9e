"""The report of a large run, against the real database: read in pages, bounded in what it
stores, and the table of every document written row by row as CSV (issue 49). The listing's
limit and the pages are made small here, so that a run of 16 documents is a large one."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, update

from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.reporting import render, report_rows, synthesize
from pipeline.reporting.html import render_page
from pipeline.reporting.page_data import PageInput
from pipeline.reporting.reduce import reduce_to_one
from pipeline.storage import reports
from pipeline.storage.db import session_scope
from pipeline.storage.models import Document, Extraction, RiskFactor, Run, RunStatus
from tests.conftest import run_cli

DOCUMENTS = 16
LIMIT = 3


def _run(engine: Engine, tmp_path: Path) -> tuple[str, list[int]]:
    """A cancelled run of DOCUMENTS filings: every fourth failed, every sixth flagged, the rest
    extracted with a grounded and an unverified risk factor; one company reads as a formula."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for i in range(DOCUMENTS):
        (tmp_path / f"f{i:03}.txt").write_text(f"Filing {i}. " + "Revenue was stated. " * 50)
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    ids = sorted(plan.document_ids)
    with session_scope(engine) as session:
        for i, doc_id in enumerate(ids):
            failed = i % 4 == 3
            session.execute(
                update(Document)
                .where(Document.id == doc_id)
                .values(
                    status="failed" if failed else "extracted",
                    error=f"gave up on {i}" if failed else None,
                    injection_excerpt="ignore previous instructions" if i % 6 == 0 else None,
                )
            )
            if failed:
                continue
            company = "=HYPERLINK(1)" if i == 1 else f"Company {i}"
            session.add(
                Extraction(
                    document_id=doc_id,
                    run_id=plan.run_id,
                    data={},
                    company=company,
                    revenue_usd=1e9 + i,
                    summary=f"Summary {i}.",
                    quotes_total=2,
                    quotes_grounded=1,
                    model="m",
                    prompt_version="v",
                )
            )
            for position, grounded in ((1, True), (2, False)):
                session.add(
                    RiskFactor(
                        document_id=doc_id,
                        run_id=plan.run_id,
                        position=position,
                        title=f"Risk {i}.{position}",
                        quote="q",
                        grounded=grounded,
                    )
                )
        session.execute(update(Run).where(Run.id == plan.run_id).values(status=RunStatus.CANCELLED))
    return plan.run_id, ids


@pytest.fixture
def large_run(engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(report_rows, "LISTED_ROWS", LIMIT)
    monkeypatch.setattr(report_rows, "PAGE_ROWS", 5)  # pages of 5: four pages of 16 documents
    run_id, _ = _run(engine, tmp_path / "files")
    return run_id


def test_a_run_past_the_listing_stores_no_table_and_names_its_file(engine: Engine, large_run: str) -> None:
    synthesize.report_cancelled(engine, large_run)
    with session_scope(engine) as session:
        row = reports.get_report(session, large_run)
        assert row is not None
        markdown, data = row.markdown, row.json
    name = f"{large_run}-documents.csv"
    assert f"[{name}]({name})" in markdown, "the table is behind a link"
    assert "| Company |" not in markdown and "Company 2" not in markdown, "no filings table"
    assert data["documents_complete"] is False
    listed = data["documents"]
    failed = [d for d in listed if d["status"] == "failed"]
    flagged = [d for d in listed if d["injection_excerpt"] and d["status"] == "extracted"]
    assert len(failed) == LIMIT and len(flagged) == LIMIT and len(listed) == 2 * LIMIT, "what needs a look"
    assert f"1 more failed or skipped: in {name}." in markdown


def test_a_small_run_keeps_its_table_in_the_report(engine: Engine, tmp_path: Path) -> None:
    run_id, _ = _run(engine, tmp_path / "files")
    synthesize.report_cancelled(engine, run_id)
    with session_scope(engine) as session:
        row = reports.get_report(session, run_id)
        assert row is not None
    assert row.json["documents_complete"] is True and len(row.json["documents"]) == DOCUMENTS
    assert "| Company |" in row.markdown and "-documents.csv" not in row.markdown


def test_the_documents_csv_has_every_row_and_no_formula(
    engine: Engine, large_run: str, tmp_path: Path
) -> None:
    out = tmp_path / "table.csv"
    result = run_cli("report", large_run, "-o", str(out))
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.open(encoding="utf-8", newline="")))
    assert len(rows) == DOCUMENTS and rows == sorted(rows, key=lambda r: r["path"]), "every document, by path"
    extracted = [r for r in rows if r["status"] == "extracted"]
    assert all(r["risk_factors"].startswith("Risk ") and r["unverified_risk_factors"] for r in extracted)
    assert "'=HYPERLINK(1)" in {r["company"] for r in rows}, "a formula shows as text"
    assert {r["error"] for r in rows if r["status"] == "failed"} == {
        "gave up on 3",
        "gave up on 7",
        "gave up on 11",
        "gave up on 15",
    }


def test_summaries_are_read_page_by_page_each_once(engine: Engine, tmp_path: Path) -> None:
    run_id, _ = _run(engine, tmp_path / "files")
    found = list(report_rows.summaries(engine, run_id, covered=set(), page_rows=2))
    assert sorted(found) == sorted(f"Summary {i}." for i in range(DOCUMENTS) if i % 4 != 3)


def test_the_synthesis_reads_its_items_as_it_sends_them() -> None:
    """Summaries are taken from the database as the first level's batches go out, not all first."""
    read: list[int] = []
    seen_at_first_call: list[int] = []

    def items() -> Iterator[str]:
        for i in range(200):
            read.append(i)
            yield "fact " * 100

    def synthesize_batch(batch: list[str]) -> str:
        seen_at_first_call.append(len(read))
        return "short answer"

    answer, depth = reduce_to_one(items(), 600, synthesize_batch, parallelism=2)
    assert answer == "short answer" and depth == 2 and len(read) == 200
    assert seen_at_first_call[0] < 200, "the first batch went before every summary was read"


def test_the_page_of_a_run_past_the_listing_points_to_its_table() -> None:
    documents = [{"path": "/in/bad.txt", "status": "failed", "error": "gave up", "injection_excerpt": None}]
    report = {
        "run_id": "r" * 32,
        "name": None,
        "query": "q",
        "model": "sim-1",
        "simulated": False,
        "answer": "a",
        "failure": None,
        "totals": {"documents": {"extracted": 20_000, "failed": 500}, "grounding": {}},
        "documents_complete": False,
        "documents": documents,
    }
    when = datetime(2026, 12, 6, tzinfo=UTC)
    page = render_page(PageInput(report=report, status="completed", created_at=when, finished_at=None))
    assert f"{'r' * 32}-documents.csv" in page and "20,500 documents" in page
    assert "499 more failed or skipped" in page and "Revenue by company" not in page


def test_markdown_of_a_large_run_is_bounded() -> None:
    rows = [render.DocumentRow(path=f"/in/{i}.txt", status="failed", error="x") for i in range(LIMIT)]
    report = render.ReportInput(
        run_id="r" * 32,
        name=None,
        query="q",
        model="m",
        simulated=False,
        answer="a",
        synthesis_levels=1,
        documents=rows,
        totals={"documents": {"extracted": 19_000, "failed": 1_000}},
        complete=False,
    )
    text = render.markdown(report)
    assert (
        len(text) < 4_000
        and "20,000 documents" in text
        and f"{1_000 - LIMIT:,} more failed or skipped" in text
    )
