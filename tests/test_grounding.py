"""Grounding quotes in the filing's text (pure): exact, normalised, absent, offsets."""

from __future__ import annotations

import random

import pytest

from pipeline.extraction.grounding import Source, ground, normalise, rate
from pipeline.extraction.merge import merge_chunks
from pipeline.extraction.schemas import FilingExtraction, RiskFactor
from pipeline.reporting import render

FILING = (
    "Item 7. Management's Discussion\n\n"
    "Total revenue for fiscal 2025 was   $1,234.5 million,\nan increase of 12%.\n"
    "We depend on a small number of suppliers for precision actuators.\n"
    "\u201cSmart\u201d grids \u2014 a risk.\n"
)


def test_a_verbatim_quote_is_found_exactly_at_its_offsets() -> None:
    quote = "We depend on a small number of suppliers"
    match = Source(FILING).find(quote)
    assert match is not None and match.how == "exact"
    assert FILING[match.start : match.end] == quote


def test_a_rewrapped_recased_quote_is_found_and_maps_back_into_the_original() -> None:
    quote = "total REVENUE for fiscal 2025 was $1,234.5 million, an increase of 12%."
    match = Source(FILING).find(quote)
    assert match is not None and match.how == "normalised"
    original = FILING[match.start : match.end]
    assert original == "Total revenue for fiscal 2025 was   $1,234.5 million,\nan increase of 12%."
    assert " ".join(original.split()).lower() == quote.lower()


def test_typographic_quotes_and_dashes_match_their_plain_forms() -> None:
    match = Source(FILING).find('"smart" grids - a risk.')
    assert match is not None
    assert FILING[match.start : match.end] == "\u201cSmart\u201d grids \u2014 a risk."


def test_characters_that_lower_into_two_keep_offsets_right() -> None:
    text = "Pre \u0130stanbul  Office was closed. Post"
    match = Source(text).find("i\u0307stanbul office WAS closed.")
    assert match is not None
    assert text[match.start : match.end] == "\u0130stanbul  Office was closed."


def test_every_quote_found_after_normalising_maps_back_to_where_it_lies() -> None:
    """Random text of words, runs of mixed whitespace and typographic characters; each quote is
    a stretch of it re-wrapped and upper-cased, as models write them."""
    rng = random.Random(7)
    pieces = ["Risk", "may", "\u2019s", "\u2014", "cost", "\n", "\t", "  ", " \r\n ", "\u00a0", "İ"]
    for _ in range(300):
        text = " ".join(rng.choice(pieces) for _ in range(rng.randrange(5, 40)))
        start = rng.randrange(len(text))
        end = rng.randrange(start, len(text) + 1)
        stretch = text[start:end]
        if not stretch.strip() or len(stretch.strip()) < 3:
            continue
        quote = " ".join(stretch.split()).upper().replace("\u2019", "'")
        found = Source(text).find(quote)
        assert found is not None, (text, quote)
        lying = text[found.start : found.end]
        assert lying == lying.strip(), "the passage starts and ends on the quote's characters"
        assert normalise(lying) == normalise(quote), (text, quote, lying)


@pytest.mark.parametrize(
    "quote",
    [
        "Total revenue for fiscal 2025 was $9,999.0 million.",  # a changed figure
        "Management believes suppliers are a key dependency.",  # a paraphrase
        "",
        "   ",
        None,
    ],
)
def test_quotes_not_in_the_text_are_not_grounded(quote: str | None) -> None:
    assert Source(FILING).find(quote) is None


def _extraction(revenue_quote: str | None, *quotes: str) -> FilingExtraction:
    return FilingExtraction(
        company="Acme",
        fiscal_year=2025,
        revenue_usd=1_234_500_000.0 if revenue_quote else None,
        revenue_quote=revenue_quote,
        risk_factors=[RiskFactor(title=f"Risk {i}", quote=q) for i, q in enumerate(quotes)],
    )


def test_an_extraction_counts_its_grounded_quotes() -> None:
    checked = ground(
        _extraction("Total revenue for fiscal 2025 was $9 billion.", "precision actuators", "Invented risk."),
        Source(FILING),
    )
    assert checked.revenue is not None and not checked.revenue.grounded
    assert [r.grounded for r in checked.risks] == [True, False]
    assert (checked.quotes_total, checked.quotes_grounded) == (3, 1)
    assert checked.risks[0].start is not None and checked.risks[1].start is None
    assert ground(_extraction(None), Source(FILING)).quotes_total == 0
    assert rate(1, 3) == 0.3333 and rate(0, 0) is None


def test_merge_prefers_a_grounded_revenue_and_risk_over_earlier_ungrounded_ones() -> None:
    source = Source(FILING)
    invented = _extraction("Revenue was a record $2 billion.", "Suppliers may fail us.")
    real = _extraction("Total revenue for fiscal 2025 was", "precision actuators")
    invented.revenue_usd = 2e9
    merged = merge_chunks([invented, real], lambda quote: source.find(quote) is not None)
    assert merged.revenue_usd == 1_234_500_000.0
    assert [r.quote for r in merged.risk_factors] == ["precision actuators"]
    assert merge_chunks([invented, real]).revenue_usd == 2e9, "without a source the first wins"


def test_the_report_marks_an_unverified_revenue_and_leaves_unverified_risks_out() -> None:
    row = render.DocumentRow(
        path="a.txt",
        status="extracted",
        company="Acme",
        revenue_usd=2e9,
        revenue_grounded=False,
        risk_titles=["Supply chain"],
        unverified_risk_titles=["Invented risk"],
        quotes_total=3,
        quotes_grounded=1,
        injection_excerpt="ignore previous instructions",
    )
    report = render.ReportInput(
        run_id="r",
        name=None,
        query="q",
        model="m",
        simulated=True,
        answer="a",
        synthesis_levels=1,
        documents=[row],
        totals={"grounding": {"quotes_total": 3, "quotes_grounded": 1}},
    )
    text = render.markdown(report)
    assert "unverified: $2.0B?" in text and "| $2.0B |" not in text
    assert "Supply chain" in text and "Invented risk" not in text
    assert "1/3" in text and "1 of 3 (33.3%)" in text
    assert "Injection warnings" in text and "ignore previous instructions" in text
    data = render.as_json(report)["documents"][0]
    assert data["revenue_grounded"] is False and data["grounding_rate"] == 0.3333
    assert data["unverified_risk_titles"] == ["Invented risk"]
