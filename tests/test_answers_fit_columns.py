"""Answers that pass our schema but not the database's columns are fitted before the write (an
over-long company, a NUL in a string, a NaN in JSON), never failing a document whose chunks were
paid for. The caps are read from the models' column types."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from sqlalchemy import String, select

from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.fit import fitted, json_safe
from pipeline.storage.models import Chunk, Document, Extraction, RiskFactor, table_of
from pipeline_dev.synth_filings import generate_filing
from tests.conftest import run_cli


def _column_length(model: type[Extraction], name: str) -> int:
    kind = table_of(model).c[name].type
    assert isinstance(kind, String) and kind.length is not None
    return kind.length


COMPANY_LENGTH = _column_length(Extraction, "company")  # VARCHAR(300)


def test_a_string_is_cut_to_its_columns_length_and_loses_its_nuls() -> None:
    row = fitted(
        Extraction,
        {"company": "A\x00cme " * 100, "summary": "no\x00nul", "fiscal_year": 2024, "not_a_column": "x\x00"},
    )
    assert row["company"] == ("Acme " * 100)[:COMPANY_LENGTH]
    assert row["summary"] == "nonul" and row["fiscal_year"] == 2024
    assert row["not_a_column"] == "x\x00", "only columns are fitted"


def test_json_loses_nuls_in_keys_and_values_at_any_depth_and_nans() -> None:
    answer = {"risk\x00s": [{"title": "Supply\x00", "score": math.nan}], "revenue": math.inf, "n": 3}
    assert json_safe(answer) == {"risks": [{"title": "Supply", "score": None}], "revenue": None, "n": 3}
    assert fitted(Extraction, {"data": answer, "revenue_usd": math.nan}) == {
        "data": json_safe(answer),
        "revenue_usd": None,
    }


@pytest.mark.usefixtures("workers")
def test_an_over_long_company_and_a_nul_in_a_risk_factor_are_stored_fitted(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    text, truth = generate_filing(4, seed=6, target_bytes=6_000)
    # The simulator's answers: the company 400 characters long, a NUL inside the first risk's title.
    (tmp_path / truth.filename).write_text(f"{text}\n[[sim:longstring]] [[sim:nulchar]]\n")
    result = run_cli("submit", str(tmp_path), "--wait", env=pipeline_env)
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    with session_scope(get_engine(pipeline_env["PIPELINE_DATABASE_URL"])) as session:
        doc = session.scalars(select(Document).where(Document.run_id == run_id)).one()
        assert (doc.status, doc.error) == ("extracted", None)
        extraction = session.scalars(select(Extraction).where(Extraction.document_id == doc.id)).one()
        assert extraction.company is not None and len(extraction.company) == COMPANY_LENGTH
        assert extraction.company.startswith(truth.company)
        titles = session.scalars(select(RiskFactor.title).where(RiskFactor.document_id == doc.id)).all()
        assert titles and not any("\x00" in title for title in titles)
        assert "\x00" not in str(extraction.data)
        answers = session.scalars(select(Chunk.result).where(Chunk.document_id == doc.id)).all()
        assert answers and all(a is not None and "\x00" not in str(a) for a in answers)
