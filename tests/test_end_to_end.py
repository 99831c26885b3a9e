"""A batch through real workers, Redis, the database and the simulator over HTTP."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from pipeline.llm.prompts import SYNTHESIZE_SYSTEM
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import (
    Chunk,
    Content,
    Document,
    Extraction,
    LLMCall,
    Report,
    RiskFactor,
    Run,
    SynthesisPartial,
)
from pipeline_dev.synth_filings import generate_filing
from tests.conftest import run_cli

DOCUMENT = re.compile(r"^<(document-[0-9a-f]+)>\n(.*?)\n</\1>$", re.DOTALL | re.MULTILINE)
"""A chunk as the prompt sends it: between the tags of its boundary (`prompts.delimited`)."""

pytestmark = pytest.mark.usefixtures("workers")


def _write(directory: Path, index: int, target_bytes: int, marker: str = "") -> tuple[Path, str]:
    text, truth = generate_filing(index, seed=99, target_bytes=target_bytes)
    path = directory / truth.filename
    path.write_text(text + marker, encoding="utf-8")
    return path, truth.company


def _statuses(session: Session, run_id: str) -> dict[str, int]:
    rows = session.execute(
        select(Document.status, func.count()).where(Document.run_id == run_id).group_by(Document.status)
    )
    return {str(status): int(count) for status, count in rows.tuples()}


def _submit(env: dict[str, str], *args: str) -> str:
    result = run_cli("submit", *args, "--wait", env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_a_batch_ends_with_a_report_and_every_document_accounted_for(
    pipeline_env: dict[str, str], sim_record: Path, tmp_path: Path
) -> None:
    companies = [_write(tmp_path, i, 30_000)[1] for i in range(5)]
    (tmp_path / "empty.txt").write_text("  \n")
    recorded_before = sim_record.stat().st_size if sim_record.exists() else 0
    run_id = _submit(pipeline_env, str(tmp_path / "*.txt"), "--query", "Revenue and risks?", "--name", "e2e")

    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        statuses = _statuses(session, run_id)
        assert statuses == {"extracted": 5, "skipped": 1}
        skipped = session.scalar(
            select(Document.error).where(Document.run_id == run_id, Document.status == "skipped")
        )
        assert skipped == "empty or whitespace-only file"
        found = set(session.scalars(select(Extraction.company).where(Extraction.run_id == run_id)))
        assert found == set(companies)
        assert session.scalar(select(func.count()).where(RiskFactor.run_id == run_id)) >= 5
        # The simulator quotes verbatim: every quote is grounded, at offsets into the filing.
        for risk, text in session.execute(
            select(RiskFactor, Content.text)
            .join(Document, Document.id == RiskFactor.document_id)
            .join(Content, Content.sha256 == Document.sha256)
            .where(RiskFactor.run_id == run_id)
        ).tuples():
            assert risk.grounded and text[risk.quote_start : risk.quote_end] == risk.quote
        stages = set(session.scalars(select(LLMCall.stage).where(LLMCall.run_id == run_id)))
        assert {"extract", "compress", "synthesize"} <= stages
        report = session.scalar(select(Report).where(Report.run_id == run_id))
        assert report is not None
        for company in companies:
            assert company in report.markdown
        assert "empty.txt" in report.markdown

    status = run_cli("status", run_id, "--json", env=pipeline_env)
    view = json.loads(status.stdout)
    assert view["status"] == "completed"
    assert view["documents"] == {"extracted": 5, "skipped": 1}
    assert view["prompt_tokens"] > 0
    assert view["grounding_rate"] == 1.0 and view["quotes_grounded"] == view["quotes_total"] > 5
    assert view["chunks_done"] == view["chunks_total"] > 0
    assert {d["quotes_total"] for d in view["grounding"]} != {0}

    out = tmp_path / "report.json"
    assert run_cli("report", run_id[:8], "--format", "json", "-o", str(out), env=pipeline_env).returncode == 0
    report_json = json.loads(out.read_text())
    assert len(report_json["documents"]) == 6
    assert report_json["synthesis_levels"] >= 2, "the small context budget forces batched synthesis"
    _assert_each_summary_synthesized_once(engine, run_id, sim_record, recorded_before)
    assert run_id[:8] in run_cli("runs", env=pipeline_env).stdout  # ids shown short
    assert run_id in [r["run_id"] for r in json.loads(run_cli("runs", "--json", env=pipeline_env).stdout)]


def _assert_each_summary_synthesized_once(engine: Engine, run_id: str, record: Path, offset: int) -> None:
    """Partial syntheses were made while the run extracted; every summary went into exactly one
    answered synthesis prompt (a partial's or the final one's), and so did every partial."""
    with session_scope(engine) as session:
        made = session.scalars(select(SynthesisPartial).where(SynthesisPartial.run_id == run_id)).all()
        texts = {p.id: p.text for p in made if p.text}
        covered = session.execute(
            select(Extraction.summary, Extraction.partial_id).where(Extraction.run_id == run_id)
        ).all()
    assert texts, "with this budget, summaries stream into partials while the run extracts"
    assert sum(p.documents for p in made if p.text) == sum(1 for _, p in covered if p in texts)
    with record.open(encoding="utf-8") as lines:
        lines.seek(offset)
        requests = [json.loads(line) for line in lines]
    prompts = {  # a set: the final synthesis goes twice at once (PIPELINE_SYNTHESIS_COPIES)
        r["messages"][-1]["content"]
        for r in requests
        if r["status"] == 200 and r["messages"][0]["content"] == SYNTHESIZE_SYSTEM
    }
    # As an item: a line of its own starting "- ". The simulator's answers repeat their items, so
    # a level's answer in a later prompt holds them again, one "- " deeper: not an item there.
    for item in [summary for summary, _ in covered] + list(texts.values()):
        assert item and sum(f"\n- {item}" in f"\n{prompt}" for prompt in prompts) == 1, item


def test_a_1mb_filing_reaches_the_llm_chunk_by_chunk_in_full(
    pipeline_env: dict[str, str], sim_record: Path, tmp_path: Path
) -> None:
    path, _ = _write(tmp_path, 7, 1_000_000)
    text = path.read_text(encoding="utf-8")
    run_id = _submit(pipeline_env, str(path))

    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        doc = session.scalar(select(Document).where(Document.run_id == run_id))
        assert doc is not None and doc.status == "extracted"
        spans = list(
            session.execute(
                select(Chunk.char_start, Chunk.char_end)
                .where(Chunk.document_id == doc.id)
                .order_by(Chunk.idx)
            )
        )
    assert len(spans) > 10
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(later[0] <= earlier[1] for earlier, later in itertools.pairwise(spans))

    sent = set()
    for line in sim_record.read_text().splitlines():
        for message in json.loads(line)["messages"]:
            sent.update(m.group(2) for m in DOCUMENT.finditer(message.get("content") or ""))
    for start, end in spans:
        assert text[start:end] in sent, f"chunk {start}:{end} never reached the LLM"

    # The chunks went side by side (the worker's chunk pool), not as one chain of 60 calls.
    with session_scope(engine) as session:
        calls = session.execute(
            select(LLMCall.created_at, LLMCall.latency_ms).where(
                LLMCall.document_id == doc.id, LLMCall.stage == "extract"
            )
        ).all()
    events = sorted(
        [(end.timestamp() - latency / 1000, 1) for end, latency in calls]
        + [(e.timestamp(), -1) for e, _ in calls]
    )
    in_flight = list(itertools.accumulate(step for _, step in events))
    assert max(in_flight) >= 2, "a document's chunks are answered in parallel"


def test_a_document_whose_answers_never_validate_fails_while_the_run_completes(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    good, _ = _write(tmp_path, 11, 25_000)
    bad, _ = _write(tmp_path, 12, 25_000, marker="\n[[sim:invalid]]\n")
    result = run_cli("submit", str(good), str(bad), "--wait", env=pipeline_env)
    # One of two documents failed: over the 10 % threshold, so the run fails, report and all.
    assert result.returncode == 1, result.stderr
    assert "1 of 2 documents failed, over the 10% threshold" in result.stderr
    run_id = result.stdout.strip().splitlines()[-1]

    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        docs = {d.path: d for d in session.scalars(select(Document).where(Document.run_id == run_id))}
        assert docs[str(good)].status == "extracted"
        failed = docs[str(bad)]
        assert failed.status == "failed"
        assert failed.error and "did not validate after repair" in failed.error
        stages = list(session.scalars(select(LLMCall.stage).where(LLMCall.document_id == failed.id)))
        assert "repair" in stages
        report = session.scalar(select(Report).where(Report.run_id == run_id))
        assert report is not None and "RUN FAILED" in report.markdown
        assert session.get(Run, run_id).status == "failed"  # type: ignore[union-attr]


def test_a_run_larger_than_its_early_start_reports_every_document(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    """The first documents go before the run's chord exists: finalize still waits for them."""
    count = 7
    companies = [_write(tmp_path, i, 3_000)[1] for i in range(count)]
    run_id = _submit({**pipeline_env, "PIPELINE_EARLY_DOCUMENTS": "3"}, str(tmp_path))
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        statuses = _statuses(session, run_id)
        assert statuses == {"extracted": count}
        summaries = session.scalar(
            select(func.count()).where(Extraction.run_id == run_id, Extraction.summary.is_not(None))
        )
        assert summaries == count
        report = session.scalar(select(Report).where(Report.run_id == run_id))
        assert report is not None
        assert all(company in report.markdown for company in companies)
        assert session.scalar(select(Run.status).where(Run.id == run_id)) == "completed"


def test_a_windows_1252_filing_keeps_its_note_once_extracted(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    text, _ = generate_filing(13, seed=99, target_bytes=21_000)
    path = tmp_path / "legacy-10k.txt"
    path.write_bytes(text.replace("Item 1.", "Item 1. Soci\u00e9t\u00e9 \u2014").encode("cp1252", "replace"))
    run_id = _submit(pipeline_env, str(path))
    with session_scope(get_engine(pipeline_env["PIPELINE_DATABASE_URL"])) as session:
        (document,) = session.scalars(select(Document).where(Document.run_id == run_id))
        assert document.status == "extracted" and document.error is None
        assert document.note == "not UTF-8: decoded as Windows-1252/Latin-1"  # once erased here
