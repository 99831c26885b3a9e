"""Confidence per field (pure): the scoring rule's table, a figure checked against its quote, and
an assessed filing's fields, escalation included."""

from __future__ import annotations

import math
import re

import pytest

from pipeline.extraction.confidence import Assessor, Evidence, score
from pipeline.extraction.grounding import Source
from pipeline.extraction.schemas import FilingExtraction, RiskFactor
from pipeline.extraction.signals import field_token_p, states_figure
from pipeline_dev.sim.request import token_logprobs

COVER = "ACME WIDGETS INC.\nAnnual report for the fiscal year ended December 31, 2025.\n"
MDNA = (
    "Item 7. Management's Discussion\n"
    "Total revenue for fiscal 2025 was $1,234.5 million, an increase of 12%.\n"
    "We depend on a small number of suppliers for precision actuators.\n"
)
TEXT = COVER + MDNA
SPANS = [(0, len(COVER)), (len(COVER), len(TEXT))]
QUOTE = "Total revenue for fiscal 2025 was $1,234.5 million, an increase of 12%."
RISK = RiskFactor(title="Supplier concentration", quote="We depend on a small number of suppliers")


def part(**changes: object) -> FilingExtraction:
    base: dict[str, object] = {
        "company": "Acme Widgets Inc.",
        "fiscal_year": 2025,
        "revenue_usd": 1_234_500_000.0,
        "revenue_quote": QUOTE,
        "risk_factors": [RISK],
    }
    return FilingExtraction.model_validate({**base, **changes})


@pytest.mark.parametrize(
    ("evidence", "expected"),
    [
        (Evidence("exact"), 0.9),
        (Evidence("normalised"), 0.8),
        (Evidence("fuzzy"), 0.45),
        (Evidence("none"), 0.15),
        (Evidence("exact", value_in_quote=True), 0.95),
        (Evidence("exact", value_in_quote=False), 0.27),
        (Evidence("exact", stating=2, agreeing=2), 0.93),
        (Evidence("exact", stating=2, agreeing=1), 0.675),
        (Evidence("exact", token_p=0.5), 0.675),
        (Evidence("none", second=True), 0.575),
        (Evidence("exact", second=False), 0.36),
    ],
)
def test_the_rule_gives_each_evidence_its_documented_score(evidence: Evidence, expected: float) -> None:
    assert score(evidence) == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize(
    ("quote", "value", "expected"),
    [
        ("Total revenue was $1,234.5 million.", 1_234_500_000.0, True),
        ("Net sales of $4.2 billion in fiscal 2025", 4.2e9, True),
        ("Total revenues 4,512 (in millions)", 4_512_000_000.0, True),
        ("Total revenue was $1,234.5 million.", 12_345_000_000.0, False),
        ("Revenue grew strongly.", 1e9, None),
    ],
)
def test_a_figure_is_checked_against_its_own_quote(quote: str, value: float, expected: bool | None) -> None:
    assert states_figure(quote, value) is expected


def assessor() -> Assessor:
    return Assessor(Source(TEXT), SPANS)


def test_a_grounded_figure_its_quote_states_scores_high_and_an_absent_field_zero() -> None:
    assessed = assessor().assess([part(revenue_usd=None, revenue_quote=None), part(company=None)])
    fields = assessed.fields
    assert fields["revenue_usd"].confidence == pytest.approx(0.95)
    assert fields["revenue_usd"].match == "exact" and fields["revenue_usd"].chunk == 1
    assert fields["company"].match == "normalised" and fields["company"].chunk == 0
    assert fields["fiscal_year"].confidence > 0.9  # both chunks agree on it
    empty = assessor().assess([part(revenue_usd=None, revenue_quote=None)])
    assert empty.fields["revenue_usd"].confidence == 0.0
    assert "revenue_usd" in empty.below(0.5)


def test_a_wrong_figure_an_invented_quote_and_a_reworded_one_score_low_to_middling() -> None:
    wrong = assessor().assess([part(revenue_usd=12_345_000_000.0)]).fields["revenue_usd"]
    invented = assessor().assess([part(revenue_quote="Revenue was a record for the company.")])
    cover = part(revenue_usd=None, revenue_quote=None)
    reworded = assessor().assess([cover, part(revenue_quote=QUOTE.replace("an increase", "a rise"))])
    assert wrong.confidence < 0.3 and wrong.match == "exact"
    assert invented.fields["revenue_usd"].match == "none" and invented.fields["revenue_usd"].confidence < 0.2
    assert reworded.fields["revenue_usd"].match == "fuzzy"
    assert wrong.confidence < reworded.fields["revenue_usd"].confidence < 0.9


def test_chunks_that_disagree_lower_the_figure_and_a_second_answer_moves_it() -> None:
    agreeing = assessor().assess([part(), part()]).fields["revenue_usd"].confidence
    split = assessor().assess([part(), part(revenue_usd=2e9)]).fields["revenue_usd"].confidence
    assert split < agreeing
    confirmed = assessor().assess([part()], second={0: part()}).fields["revenue_usd"].confidence
    disputed = assessor().assess([part()], second={0: part(revenue_usd=2e9)}).fields["revenue_usd"].confidence
    assert disputed < 0.5 < confirmed


def test_escalation_keeps_the_better_grounded_answer_and_says_which_fields() -> None:
    weak = [part(revenue_usd=9e9, revenue_quote="Revenue was nine billion.", risk_factors=[])]
    first = assessor().assess(weak)
    low = first.below(0.5)
    assert "revenue_usd" in low
    better = assessor().escalate(first, low, weak, {0: part()})
    assert better.grounded.extraction.revenue_usd == 1_234_500_000.0
    assert better.grounded.extraction.revenue_quote == QUOTE
    assert better.escalated == ["revenue_usd"]
    worse = assessor().escalate(first, low, weak, {0: part(revenue_usd=None, revenue_quote=None)})
    assert worse.grounded.extraction.revenue_usd == 9e9 and worse.escalated == []


def test_an_ungrounded_risk_is_replaced_by_the_escalation_answers_grounded_one() -> None:
    invented = RiskFactor(title="Supplier concentration", quote="Suppliers are few and far between.")
    weak = [part(risk_factors=[invented])]
    first = assessor().assess(weak)
    assert first.below(0.5) == ["risk:0"]
    better = assessor().escalate(first, ["risk:0"], weak, {0: part()})
    assert better.grounded.extraction.risk_factors == [RISK]
    assert better.risks[0].match == "exact" and better.escalated == ["risk_factors"]


def test_each_fields_token_probability_is_its_least_likely_token() -> None:
    content = '{"company": "Acme Inc.", "fiscal_year": 2025, "revenue_usd": 1234.5, "risk_factors": []}'
    pieces = re.findall(r"\w+|\s+|[^\w\s]", content)
    logprobs = [math.log(0.3) if piece == "1234" else math.log(0.99) for piece in pieces]
    found = field_token_p(content, list(zip(pieces, logprobs, strict=True)))
    assert found == {"company": 0.99, "fiscal_year": 0.99, "revenue_usd": 0.3}
    assert field_token_p(content, [("{", 0.0)]) == {}, "tokens that do not spell the answer say nothing"


def test_the_simulators_log_probabilities_are_lower_on_the_values_it_changed() -> None:
    content = '{"revenue_usd": 12345000000.0, "company": "Acme"}'
    tokens = token_logprobs(content, ("12345000000.0",))
    assert "".join(t["token"] for t in tokens) == content
    found = field_token_p(content, [(t["token"], t["logprob"]) for t in tokens])
    assert found["revenue_usd"] <= 0.8 and found["company"] >= 0.6
    assert token_logprobs(content, ("12345000000.0",)) == tokens, "deterministic"


FILING_WITH_RISKS = (
    "ACME WIDGETS INC.\n\nItem 1. Business\n\nWe make widgets for the automotive industry.\n\n"
    "Item 1A. Risk Factors\n\nSupplier concentration.\nWe depend on a small number of suppliers for "
    "precision actuators.\n\nLabor availability.\nWe may not find enough skilled workers for our plants.\n\n"
    "Item 7. Management's Discussion\n\n" + QUOTE + "\n"
)


def test_a_quote_of_a_few_words_grounds_nothing() -> None:
    source = Source(FILING_WITH_RISKS)
    assessed = Assessor(source, [(0, len(FILING_WITH_RISKS))]).assess(
        [part(revenue_quote="$", risk_factors=[])]
    )
    revenue = assessed.fields["revenue_usd"]
    assert revenue.match == "short" and revenue.confidence < 0.2, "a '$' is in every filing"


def test_a_risk_is_trusted_under_its_own_heading_in_item_1a_only() -> None:
    text = FILING_WITH_RISKS
    assessor_ = Assessor(Source(text), [(0, len(text))])
    under_heading = RiskFactor(
        title="Supplier concentration", quote="We depend on a small number of suppliers"
    )
    mislabelled = RiskFactor(
        title="Currency exposure", quote="We may not find enough skilled workers for our plants."
    )
    not_a_risk = RiskFactor(title="Business", quote="We make widgets for the automotive industry.")
    scores = assessor_.assess([part(risk_factors=[under_heading, mislabelled, not_a_risk])]).risks
    assert scores[0].confidence >= 0.9
    assert scores[1].confidence < 0.3 and scores[2].confidence < 0.3


LLAMA_TOKENS = [
    ("{", -3.085), (' "', -5.967), ("company", -1.682), ('":', -0.154), (' "', -1.979), ("AC", -0.157),
    ("ME", -0.0), (" W", -0.034), ("ID", -0.015), ("GET", -0.001), ("S", -0.002), (" IN", -0.16), ("C", -0.0),
    ('.",', -0.097), (' "', -0.091), ("f", -0.192), ("iscal", -0.002), ("_", -0.016), ("year", -0.014),
    ('":', -0.335), (" ", -2.589), ("2", -0.015), ("0", -0.004), ("2", -0.002), ("5", -0.23), (" }", -0.202),
]  # fmt: skip
"""SmolLM2-135M's answer as llama-cpp-python's server gave it (`logprobs: true, top_logprobs: 0`)."""


def test_a_real_servers_tokens_give_each_value_its_own_probability_not_its_quotes() -> None:
    content = "".join(token for token, _ in LLAMA_TOKENS)
    assert content == '{ "company": "ACME WIDGETS INC.", "fiscal_year": 2025 }'
    found = field_token_p(content, LLAMA_TOKENS)
    # The opening quote's token (-1.979) and the space before the year (-2.589) are the format's
    # doubt, not the value's: the company's least likely token is " IN", the year's "5".
    assert found == {"company": round(math.exp(-0.16), 4), "fiscal_year": round(math.exp(-0.23), 4)}
