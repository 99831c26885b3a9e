"""`--schema module:Model`: any pydantic model, its answers stored as JSON, quotes grounded."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from pipeline.extraction import custom
from pipeline.extraction.grounding import Source
from pipeline.runtime.embedded import Child
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Content, Document, Extraction, Report, Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import run_cli

SCHEMA = "tests.custom_schema:SegmentFacts"


def test_a_custom_schema_is_extracted_stored_as_json_and_grounded(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path: Path
) -> None:
    write_filings(tmp_path, 2, seed=95, sizes=[30_000] * 2)
    result = run_cli("submit", str(tmp_path), "--schema", SCHEMA, "--wait", env=pipeline_env)
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None and run.schema == SCHEMA
        rows = session.execute(
            select(Extraction, Content.text)
            .join(Document, Document.id == Extraction.document_id)
            .join(Content, Content.sha256 == Document.sha256)
            .where(Extraction.run_id == run_id)
        ).all()
        assert len(rows) == 2
        checked = 0
        for extraction, text in rows:
            data = extraction.data
            assert set(data) == {"company", "segments", custom.GROUNDING_KEY}
            assert extraction.company is None  # no fact columns for a custom schema
            checks = data[custom.GROUNDING_KEY]
            assert extraction.quotes_total == len(checks) == len(data["segments"]) > 0
            assert extraction.quotes_grounded == sum(c["grounded"] for c in checks)
            source = Source(text)
            for check, segment in zip(checks, data["segments"], strict=True):
                assert check["grounded"] == (source.find(segment["quote"]) is not None)
                checked += 1
        assert checked > 0
        assert session.scalar(select(Report.markdown).where(Report.run_id == run_id))
    # The HTML page's filings table has the schema's fields, not the 10-K columns.
    page = tmp_path / "report.html"
    assert run_cli("report", run_id, "--format", "html", "-o", str(page), env=pipeline_env).returncode == 0
    html = page.read_text()
    assert "<th>company</th><th>segments</th><th>Quotes found</th>" in html
    assert "<th>Fiscal year</th>" not in html and f"schema {SCHEMA}" in html


def test_a_schema_that_cannot_be_used_is_refused_at_submit(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    write_filings(tmp_path, 1, seed=97, sizes=[20_000])
    for spec, reason in [
        ("no_such_module:Model", "cannot import no_such_module"),
        ("tests.custom_schema:NOT_A_MODEL", "is not a pydantic model"),
        ("tests.custom_schema", "expected module:Model"),
    ]:
        result = run_cli("submit", str(tmp_path), "--schema", spec, env=pipeline_env)
        assert result.returncode == 2 and reason in result.stderr, (spec, result.stderr)


def test_generic_merge_and_grounding_of_quote_fields() -> None:
    merged = custom.merge(
        [
            {"company": None, "segments": [{"name": "A", "quote": "Alpha sells."}], "meta": {"year": 2024}},
            {
                "company": "Acme",
                "segments": [{"name": "A", "quote": "Alpha sells."}, {"name": "B", "quote": "Made up."}],
            },
        ]
    )
    assert merged["company"] == "Acme" and merged["meta"] == {"year": 2024}
    assert [s["name"] for s in merged["segments"]] == ["A", "B"]
    data, total, grounded = custom.ground(merged, Source("Intro. Alpha  SELLS. Outro."))
    assert (total, grounded) == (2, 1)
    first, second = data[custom.GROUNDING_KEY]
    assert first["path"] == "segments[0].quote" and first["grounded"] and first["start"] == 7
    assert second["path"] == "segments[1].quote" and not second["grounded"]
    assert custom.without_ungrounded(data)["segments"][1]["quote"] is None
    with pytest.raises(ValueError, match="expected module:Model"):
        custom.load_schema("nothing")
