"""Which of the report's charts are drawn, and what is said instead (pure: chart_rules on
hand-made page data; tests/test_report_browser.py does the same on real runs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from matplotlib.figure import Figure

from pipeline.reporting import chart_rules
from pipeline.reporting.chart_rules import Drawn, Said, flat
from pipeline.reporting.html import render_page
from pipeline.reporting.page_data import CostRow, PageInput
from pipeline.reporting.timeline import CallSpan
from tests.chart_checks import readable_problems


def _filing(
    company: str, revenue: float | None = 1e9, grounded: int = 7, total: int = 7, **extra: Any
) -> dict[str, Any]:
    return {
        "path": f"/in/{company.lower()}.txt",
        "status": "extracted",
        "company": company,
        "revenue_usd": revenue,
        "risk_titles": ["Interest rates"],
        "quotes_total": total,
        "quotes_grounded": grounded,
        **extra,
    }


def _report(documents: list[dict[str, Any]], failure: str | None = None) -> dict[str, Any]:
    return {"run_id": "r" * 32, "model": "sim-1", "failure": failure, "totals": {}, "documents": documents}


def _page(
    calls: list[CallSpan],
    documents: list[dict[str, Any]] | None = None,
    by_stage: list[CostRow] | None = None,
    by_model: list[CostRow] | None = None,
    status: str = "completed",
    failure: str | None = None,
) -> PageInput:
    return PageInput(
        report=_report(documents or [], failure),
        status=status,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        finished_at=datetime(2026, 1, 1, 0, 1, tzinfo=UTC),
        calls=calls,
        by_stage=by_stage or [],
        by_model=by_model or [],
    )


def _steady(seconds: int, per_s: int = 4, status: str = "ok") -> list[CallSpan]:
    """`per_s` calls sent each second for `seconds`, each 1 s long: always `per_s` in flight."""
    return [CallSpan(t + 1.0, 1.0, 0.0, status) for t in range(seconds) for _ in range(per_s)]


def test_bars_say_nothing_when_there_are_none_one_or_all_equal() -> None:
    assert flat([]) == "none" and flat([3.0]) == "one"
    assert flat([1.0, 1.0, 1.0]) == "equal" and flat([0.0, 0.0]) == "equal"
    assert flat([1.0, 0.999]) is None and flat([0.0, 1.0]) is None


def test_twenty_filings_with_every_quote_found_are_a_sentence_not_twenty_equal_bars() -> None:
    report = _report([_filing(f"Co{i}", revenue=1e9 + i) for i in range(20)])
    assert chart_rules.grounding(report) == Said(
        "grounding", "Every quote of the 20 filings was found in its filing's text."
    )
    assert isinstance(chart_rules.revenue(report), Drawn), "twenty different revenues are a chart"
    uneven = _report([_filing("A", grounded=7), _filing("B", grounded=5)])
    drawn = chart_rules.grounding(uneven)
    assert isinstance(drawn, Drawn) and not readable_problems(drawn.figure)
    half = _report([_filing("A", grounded=1, total=2), _filing("B", grounded=2, total=4)])
    assert chart_rules.grounding(half) == Said(
        "grounding", "Each of the 2 filings had 50% of its quotes found in its text."
    )


def test_one_filing_gives_sentences_for_its_revenue_risks_and_quotes() -> None:
    report = _report([_filing("Acme", revenue=2.5e9, grounded=5, revenue_grounded=False)])
    assert chart_rules.revenue(report) == Said(
        "revenue", "Only Acme has a revenue: $2.5B (unverified: its quote is not in the filing)."
    )
    assert chart_rules.risks(report) == Said(
        "risks", "One risk factor across the run: Interest rates (1 filing)."
    )
    assert chart_rules.grounding(report) == Said("grounding", "Acme: 5 of 7 quotes found in its text (71%).")
    same = _report([_filing("A", risk_titles=["X", "Y"]), _filing("B", risk_titles=["x", "Y"])])
    assert chart_rules.risks(same) == Said(
        "risks", "No risk factor stands out: each of the 2 is named by 2 filings (X, Y)."
    )
    assert chart_rules.revenue(_report([_filing("A", revenue=None)])) is None, "no revenue: nothing at all"


def test_one_model_is_a_sentence_beside_the_per_stage_panel() -> None:
    stages = [CostRow("extract", 10, 9000, 300, 0.0015), CostRow("synthesize", 2, 200, 30, 0.00005)]
    page = _page(_steady(3), by_stage=stages, by_model=[CostRow("gpt-4o-mini", 12, 9200, 330, 0.0016)])
    drawn = chart_rules.cost(page)
    assert isinstance(drawn, Drawn) and drawn.notes == ("Every call went to gpt-4o-mini: $0.0016.",)
    assert [ax.get_title(loc="left") for ax in drawn.figure.axes] == ["per stage"]
    assert not readable_problems(drawn.figure)


def test_calls_that_used_no_tokens_give_one_sentence_and_no_empty_axes_labelled_0() -> None:
    stages = [CostRow("extract", 7, 0, 0, None), CostRow("synthesize", 2, 0, 0, None)]
    page = _page(_steady(1, status="rejected"), by_stage=stages, by_model=[CostRow("sim-1", 9, 0, 0, None)])
    assert chart_rules.cost(page) == Said(
        "cost", "The run's calls used no tokens, so there is nothing to compare per stage or model."
    )
    assert chart_rules.latency(page) == Said(
        "latency", "No call was answered, so there is no latency to show."
    )


def test_calls_sent_within_two_seconds_are_a_sentence_not_one_block() -> None:
    calls = [CallSpan(3.2 + i / 10, 0.1, 0.0, "rejected") for i in range(7)] + [CallSpan(4.5, 0.1, 0, "ok")]
    said = chart_rules.timeline(_page(calls))
    assert said == Said(
        "timeline",
        "All 8 LLM calls were sent within 2 s, between 3.1 s and 4.4 s after the run was submitted: too "
        "short a time for a chart of calls per second. 1 answered, 7 failed.",
    )
    one = chart_rules.timeline(_page([CallSpan(0.5, 0.2, 0.0, "rejected")]))
    assert isinstance(one, Said) and one.sentence.startswith(
        "The one LLM call was sent within 1 s, 0.3 s after"
    )
    assert chart_rules.timeline(_page([])) is None and chart_rules.latency(_page([])) is None


def test_a_constant_number_in_flight_is_a_line_on_an_axis_from_0() -> None:
    drawn = chart_rules.timeline(_page(_steady(5)))
    assert isinstance(drawn, Drawn)
    top, bottom = drawn.figure.axes
    assert bottom.get_ylim()[0] == 0 and bottom.get_ylim()[1] > 4, "4 in flight all along, above the axis"
    assert not readable_problems(drawn.figure), readable_problems(drawn.figure)
    assert [t.get_text() for t in top.get_xticklabels() if t.get_text()], "the top panel has its own x labels"


def test_latency_needs_enough_answered_calls_that_differ() -> None:
    few = [CallSpan(1.0 + i, 0.05 + i / 100, 0.0, "ok") for i in range(4)]
    assert chart_rules.latency(_page(few)) == Said(
        "latency", "The 4 answered calls took 0.05 s to 0.08 s (median 0.06 s)."
    )
    same = [CallSpan(1.0 + i, 0.2, 0.0, "ok") for i in range(30)]
    said = chart_rules.latency(_page(same))
    assert isinstance(said, Said) and "took 0.20 s to 0.20 s" in said.sentence
    many = [CallSpan(1.0 + i, 0.05 + i / 100, 0.0, "ok") for i in range(30)]
    drawn = chart_rules.latency(_page(many))
    assert isinstance(drawn, Drawn) and not readable_problems(drawn.figure)


def test_a_failed_run_lists_its_reasons_first_and_draws_no_chart_that_says_nothing() -> None:
    failed = {"path": "/in/a.txt", "status": "failed", "error": "the endpoint refused the API key: 401"}
    page = _page(
        _steady(1, per_s=3, status="rejected"),
        [failed, {**failed, "path": "/in/b.txt"}],
        by_stage=[CostRow("extract", 3, 0, 0, None)],
        by_model=[CostRow("sim-1", 3, 0, 0, None)],
        status="failed",
        failure="2 of 2 documents failed, over the 10% threshold",
    )
    assert not [c for c in chart_rules.page_charts(page).values() if isinstance(c, Drawn)]
    html = render_page(page)
    assert "<svg" not in html
    assert html.index('id="not-extracted"') < html.index('id="answer"'), "the failures come first"
    assert "<li>2 failed: the endpoint refused the API key</li>" in html


def test_the_readability_check_catches_what_the_old_charts_did() -> None:
    fig = Figure()
    fig.set_label("old")
    ax = fig.subplots()
    ax.step([1.0], [4], where="pre")  # one bin of a constant series: an invisible line, 3.78 to 4.22
    problems = readable_problems(fig)
    assert any("no title" in p for p in problems) and any("starts at 3.7" in p for p in problems)
    assert any("a line of one point" in p for p in problems) and any("x label ''" in p for p in problems)


def test_calls_an_open_circuit_held_were_never_sent_and_are_not_charted_as_sent() -> None:
    held = [CallSpan(10.0 + i, 0.0, 5.0, "circuit_open") for i in range(20)]
    page = _page([CallSpan(1.0, 0.5, 0.0, "ok"), *held])
    said = chart_rules.timeline(page)
    assert isinstance(said, Said) and said.sentence.startswith(
        "The one LLM call was sent within 1 s, 0.5 s after"
    )
    assert said.sentence.endswith(" 1 answered."), "20 held calls are no failed sends"
    html = render_page(page)
    assert "1 call sent, 0 refused with 429" in html and "20 more were held by the endpoint" in html
    assert chart_rules.timeline(_page(held)) is None
    assert "No LLM call was sent. 20 more were held" in render_page(_page(held))


def test_an_outage_is_marked_on_the_timeline_and_said_in_its_summary() -> None:
    """Calls the open circuit held (never sent) mark the endpoint's outage: one band on the
    calls-per-second panel, merged across the probes between them, and a sentence."""
    from pipeline.reporting import run_charts
    from pipeline.reporting.timeline import build_timeline

    held = [CallSpan(20.0 + 3 * i, 0.0, 3.0, "circuit_open") for i in range(8)]  # held 17 s to 41 s
    probes = [CallSpan(25.0, 0.1, 0.0, "unavailable"), CallSpan(33.0, 0.1, 0.0, "unavailable")]
    calls = _steady(15) + held + probes + [CallSpan(45.0 + i, 1.0, 0.0, "ok") for i in range(5)]
    timeline = build_timeline(calls)
    assert timeline is not None and timeline.outages == [(17.0, 41.0)]
    drawn = chart_rules.timeline(_page(calls))
    assert isinstance(drawn, Drawn)
    top = drawn.figure.axes[0]
    assert "endpoint down (its circuit open)" in [t.get_text() for t in top.get_legend().get_texts()]
    assert not readable_problems(drawn.figure), readable_problems(drawn.figure)
    page = str(run_charts._timeline(_page(calls)))
    assert "The endpoint was down (its circuit open) for 24 s in 1 outage." in page
    assert "8 more were held by the endpoint" in page
