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


def test_calibration_counts_each_scored_field_in_its_band_and_the_page_draws_it() -> None:
    from pipeline.reporting.calibration import band_of
    from pipeline.reporting.eval_page import render_eval_page

    truth = [
        TruthFiling("a.txt", "Acme", 2025, 1e9, ["Labor availability"]),
        TruthFiling("b.txt", None, 2024, None, None),
    ]
    found = {
        "a.txt": ExtractedFiling(
            "a.txt",
            "Acme",
            2025,
            2e9,
            True,
            [("Labor availability", True)],
            {"company": 0.9, "fiscal_year": 0.95, "revenue_usd": 0.1},
            [0.85],
        ),
        "b.txt": ExtractedFiling("b.txt", "Beta", 2024, 5.0, True, [], {"company": 0.3, "fiscal_year": 0.9}),
    }
    result = evaluate(truth, found)
    b = result.filings[1]
    assert b.company_exact is None and b.revenue is None and b.fiscal_year is True, "null truth: not scored"
    calibration = result.calibration()
    bands = {band["band"]: band for band in calibration.as_dict()["bands"]}
    assert bands["0.0-0.2"]["fields"] == 1 and bands["0.0-0.2"]["accuracy"] == 0.0  # the wrong revenue
    assert bands["0.8-1.0"]["fields"] == 4 and bands["0.8-1.0"]["accuracy"] == 1.0
    assert calibration.spread() == (0.0, 1.0) and band_of(1.0) == 4 and band_of(0.2) == 1
    page = render_eval_page("r1", result.as_dict(), calibration)
    assert 'http-equiv="Content-Security-Policy"' in page and "default-src 'none'" in page
    assert "<svg" in page and "Reliability" in page and "<script" not in page
