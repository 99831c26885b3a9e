"""The filing's own company and fiscal year against the model's answer (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.extraction import filed
from pipeline.extraction.confidence import Assessor
from pipeline.extraction.grounding import Source
from pipeline.extraction.schemas import FilingExtraction

TEXT = "Acme Widgets, Inc.\nAnnual report for the fiscal year 2023.\nTotal revenue was $1,234 million.\n"


@pytest.mark.parametrize(
    ("edgar", "reader"),
    [
        ("COCA COLA CO", "The Coca-Cola Company"),
        ("PROCTER & GAMBLE CO", "The Procter & Gamble Company"),
        ("WELLS FARGO & COMPANY/MN", "Wells Fargo & Company"),
        ("BANK OF AMERICA CORP /DE/", "Bank of America Corporation"),
        ("McDONALD\u2019S CORPORATION", "McDonald's Corp"),
        ("AMAZON.COM, INC.", "Amazon.com Inc"),
    ],
)
def test_edgar_conformed_names_match_the_names_a_reader_writes(edgar: str, reader: str) -> None:
    assert filed.same_company(edgar, reader)


def test_different_companies_do_not_match() -> None:
    assert not filed.same_company("Coca-Cola Consolidated, Inc.", "The Coca-Cola Company")
    assert not filed.same_company("Inc.", "Corp")


def _assessed(company: str | None, year: int | None):  # type: ignore[no-untyped-def]
    answer = FilingExtraction(
        company=company, fiscal_year=year, revenue_usd=None, revenue_quote=None, risk_factors=[]
    )
    return Assessor(Source(TEXT), [(0, len(TEXT))]).assess([answer])


def test_the_filing_states_the_value_and_an_agreeing_model_raises_its_confidence() -> None:
    checked = filed.cross_check(_assessed("Acme Widgets Inc", 2023), "ACME WIDGETS INC", 2023, "SGML header")
    assert checked.grounded.extraction.company == "ACME WIDGETS INC"
    assert checked.fields["company"].confidence == filed.AGREES
    assert checked.fields["fiscal_year"].confidence == filed.AGREES
    assert checked.checks["company"]["verdict"] == "agrees"


def test_a_disagreeing_model_lowers_the_field_under_the_escalation_threshold_and_is_kept() -> None:
    checked = filed.cross_check(
        _assessed("Widget Holdings", 2022), "ACME WIDGETS INC", 2023, "inline XBRL (dei)"
    )
    assert checked.grounded.extraction.fiscal_year == 2023
    assert checked.fields["company"].confidence < 0.5 and checked.fields["fiscal_year"].confidence < 0.5
    assert checked.checks["fiscal_year"] == {
        "filed": 2023,
        "model": 2022,
        "verdict": "differs",
        "source": "inline XBRL (dei)",
    }


def test_without_metadata_the_model_answer_stands_as_scored() -> None:
    assessed = _assessed("Acme Widgets, Inc.", 2023)
    assert filed.cross_check(assessed, None, None, "") is assessed


def _with_revenue(value: float) -> Any:
    answer = FilingExtraction(
        company=None,
        fiscal_year=None,
        revenue_usd=value,
        revenue_quote="Total revenue was $1,234 million.",
        risk_factors=[],
    )
    return Assessor(Source(TEXT), [(0, len(TEXT))]).assess([answer])


def test_a_revenue_the_filings_xbrl_states_is_raised_and_the_agreement_is_the_reason() -> None:
    assessed = _with_revenue(1_234e6)
    checked = filed.check_revenue(assessed, (1_234e6 * 1.004, "us-gaap:Revenues"))
    before, after = assessed.fields["revenue_usd"].confidence, checked.fields["revenue_usd"].confidence
    assert after > before and checked.checks["revenue_usd"]["verdict"] == "agrees"
    assert checked.checks["revenue_usd"]["source"] == "inline XBRL (us-gaap:Revenues)"
    assert filed.check_revenue(checked, (1_234e6, "us-gaap:Revenues")) is checked, "checked once"


def test_a_revenue_the_filings_xbrl_contradicts_is_lowered_under_escalation_but_kept() -> None:
    assessed = _with_revenue(2.39)  # earnings per share read as revenue
    checked = filed.check_revenue(assessed, (1_234e6, "us-gaap:Revenues"))
    assert checked.grounded.extraction.revenue_usd == 2.39, "the model is not overruled"
    assert checked.fields["revenue_usd"].confidence < 0.5 and "revenue_usd" in checked.below(0.5)
    assert checked.checks["revenue_usd"]["verdict"] == "differs"
    assert filed.check_revenue(assessed, None) is assessed
