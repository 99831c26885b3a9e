"""Scoring extractions against a truth file (pure)."""

from __future__ import annotations

from pipeline.reporting.evaluate import (
    ExtractedFiling,
    TruthFiling,
    evaluate,
    normalise_company,
    titles_match,
)

TRUTH = [
    TruthFiling(
        "a.txt", "Acme Holdings, Inc.", 2025, 1_000_000_000.0, ["Labor availability", "Cybersecurity"]
    ),
    TruthFiling("b.txt", "Beta Co.", 2024, 50_000_000.0, ["Supply chain concentration"]),
]


def test_scores_per_filing_and_overall() -> None:
    extracted = {
        "a.txt": ExtractedFiling(
            "a.txt",
            "ACME Holdings Inc",
            2025,
            1_005_000_000.0,
            True,
            [("Labour availability", True), ("Cyber security incidents", False), ("Weather", True)],
        ),
        "c.txt": ExtractedFiling("c.txt", "Gamma", 2020, None),
    }
    result = evaluate(TRUTH, extracted)
    a, b = result.filings
    assert (a.company_exact, a.company_normalised, a.fiscal_year, a.revenue) == (False, True, True, True)
    assert (a.risks_matched, a.risks_truth, a.risks_extracted) == (1, 2, 3)
    assert not b.found and b.risk_recall == 0.0
    overall = result.overall()
    assert overall["company_normalised"] == 0.5 and overall["revenue"] == 0.5 and overall["found"] == 1
    assert overall["risk_recall"] == round(1 / 3, 4) and overall["risk_precision"] == round(1 / 3, 4)
    assert result.unscored == ["c.txt"]


def test_tolerance_and_grounded_only() -> None:
    found = ExtractedFiling(
        "b.txt", "Beta Co.", 2024, 50_600_000.0, False, [("Supply chain concentration", False)]
    )
    loose = evaluate(TRUTH[1:], {"b.txt": found}, revenue_tolerance=0.02).filings[0]
    assert loose.revenue and loose.risks_matched == 1
    assert not evaluate(TRUTH[1:], {"b.txt": found}).filings[0].revenue, "1.2 % is outside 1 %"
    strict = evaluate(TRUTH[1:], {"b.txt": found}, revenue_tolerance=0.02, grounded_only=True).filings[0]
    assert not strict.revenue and strict.risks_extracted == 0 and strict.risks_matched == 0


def test_normalisation_and_fuzzy_titles() -> None:
    assert normalise_company("Acme Holdings, Inc.") == normalise_company("ACME holdings inc") == "acme"
    assert titles_match("Labor availability", "Labour Availability.", 0.85)
    assert not titles_match("Customer concentration", "Supply chain concentration", 0.85)
    assert titles_match("Customer concentration", "Supply chain concentration", 0.6)
