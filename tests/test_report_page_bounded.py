"""The HTML page of a large run is read in bounded memory (issue 49): the run's calls as a stream,
in the orders its charts need (what it says of them is what the same calls held in a list would
give, on Postgres and on SQLite), the slowest documents picked as they stream by, and a custom
schema's table cut at the report's listing limit, saying how many more and where."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, select

from pipeline.core.settings import Settings
from pipeline.reporting import report_rows
from pipeline.reporting.html import render_page
from pipeline.reporting.page_data import load_page
from pipeline.reporting.timeline import CallSpan, digest_of
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, Extraction, LLMCall, Report, Run, aware

SCHEMA = "tests.custom_schema:SegmentFacts"
STATUSES = ["ok"] * 6 + ["invalid", "rate_limited", "unavailable", "circuit_open"]


def _run(url: str, calls: int) -> str:
    """A run with a report and `calls` calls of every outcome, some waiting in the limiter,
    some held by an open circuit, stored in no particular order."""
    rng = random.Random(49)
    run_id = uuid.uuid4().hex
    start = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    with session_scope(get_engine(url)) as session:
        session.add(Run(id=run_id, query="q", model="m", prompt_version="p", created_at=start))
        session.flush()
        document = Document(run_id=run_id, path="/in/a.txt", status="extracted")
        session.add(document)
        session.flush()
        for _ in range(calls):
            status = rng.choice(STATUSES)
            session.add(
                LLMCall(
                    run_id=run_id,
                    document_id=document.id,
                    stage="extract",
                    model="m",
                    status=status,
                    latency_ms=0 if status == "circuit_open" else rng.randint(50, 4000),
                    limiter_wait_ms=rng.choice([0, 0, 0, rng.randint(1, 3000)]),
                    created_at=start + timedelta(milliseconds=rng.randint(500, 120_000)),
                )
            )
        session.add(Report(run_id=run_id, markdown="", json={"run_id": run_id}))
    return run_id


def test_the_streamed_calls_say_what_the_same_calls_in_a_list_say(each_database: str) -> None:
    run_id = _run(each_database, 400)
    engine = get_engine(each_database)
    try:
        with session_scope(engine) as session:
            start = aware(session.get_one(Run, run_id).created_at)
            rows = session.execute(
                select(LLMCall.created_at, LLMCall.latency_ms, LLMCall.limiter_wait_ms, LLMCall.status).where(
                    LLMCall.run_id == run_id
                )
            ).tuples()
            listed = [
                CallSpan((aware(end) - start).total_seconds(), latency / 1000, wait / 1000, status)
                for end, latency, wait, status in rows
            ]
        page = load_page(engine, run_id, Settings(), limiter=[])
        assert page.calls == [], "the page holds the calls' digest, not the calls"
        expected, streamed = digest_of(listed), page.call_digest()
        assert streamed.timeline is not None and streamed.timeline.pauses and streamed.timeline.outages
        assert max(streamed.timeline.waiting) > 0 and streamed.held > 0
        assert streamed.waited_s == pytest.approx(expected.waited_s)
        assert replace(streamed, waited_s=0.0) == replace(expected, waited_s=0.0)
    finally:
        with session_scope(engine) as session:
            session.execute(delete(Run).where(Run.id == run_id))


def test_a_custom_schema_table_lists_the_first_documents_by_path_and_says_how_many_more(
    each_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_rows, "LISTED_ROWS", 2)
    run_id = uuid.uuid4().hex
    start = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    engine = get_engine(each_database)
    with session_scope(engine) as session:
        session.add(Run(id=run_id, query="q", model="m", prompt_version="p", schema=SCHEMA, created_at=start))
        session.flush()
        for i in (4, 0, 3, 1, 2):
            document = Document(
                run_id=run_id,
                path=f"/in/f{i}.txt",
                status="extracted",
                started_at=start,
                finished_at=start + timedelta(seconds=10 + i),
            )
            session.add(document)
            session.flush()
            data = {"company": f"Company {i}", "segments": []}
            session.add(
                Extraction(document_id=document.id, run_id=run_id, data=data, model="m", prompt_version="p")
            )
        session.add(Report(run_id=run_id, markdown="", json={"run_id": run_id, "query": "q"}))
    try:
        page = load_page(engine, run_id, Settings(), limiter=[])
        assert page.custom is not None and page.custom_total == 5
        assert [path for path, _ in page.custom.rows] == ["/in/f0.txt", "/in/f1.txt"]
        assert [d.path for d in page.slowest] == [f"/in/f{i}.txt" for i in (4, 3, 2, 1, 0)]
        assert f"The first 2 of 5 filings by path; 3 more: every document is in {run_id}-documents.csv" in (
            " ".join(render_page(page).split())
        )
    finally:
        with session_scope(engine) as session:
            session.execute(delete(Run).where(Run.id == run_id))
