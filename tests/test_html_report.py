"""The HTML report's pure parts: the page from a report's data, its escaping, its charts, the
calls' timeline, and the quota line (no services)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pipeline.core.settings import Settings
from pipeline.reporting.chart_rules import Drawn, page_charts
from pipeline.reporting.html import CSP, render_page
from pipeline.reporting.page_data import CostRow, CustomTable, PageInput, SlowDocument, quota
from pipeline.reporting.timeline import CallSpan, build_timeline, pauses_after_429, peak_levels, percentile
from tests.chart_checks import readable_problems

HOSTILE = '<script>document.title=\'pwned\'</script><img src=x onerror="alert(1)"> <a href="javascript:alert(1)">x</a>'


def _document(path: str, company: str | None, revenue: float | None, **extra: Any) -> dict[str, Any]:
    return {
        "path": path,
        "status": "extracted",
        "error": None,
        "company": company,
        "fiscal_year": 2024,
        "revenue_usd": revenue,
        "revenue_grounded": True,
        "risk_titles": ["Supply chain disruption", "Interest rates"],
        "unverified_risk_titles": [],
        "quotes_total": 4,
        "quotes_grounded": 3,
        "injection_excerpt": None,
        **extra,
    }


def _report(documents: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "run_id": "r" * 32,
        "name": f"night {HOSTILE}",
        "query": f"Revenue? {HOSTILE}",
        "model": "sim-1",
        "simulated": True,
        "answer": f"Line one.\n{HOSTILE}",
        "synthesis_levels": 1,
        "failure": None,
        "totals": {
            "documents": {"extracted": 2, "failed": 1},
            "llm_calls": 6,
            "tokens": 1000,
            "grounding": {"quotes_total": 8, "quotes_grounded": 6},
        },
        "documents": documents,
    }


def _calls() -> list[CallSpan]:
    return [
        CallSpan(1.0, 0.5, 0.0, "ok"),
        CallSpan(1.2, 0.6, 0.2, "ok"),
        CallSpan(1.5, 0.1, 0.0, "rate_limited"),
        CallSpan(4.0, 0.5, 2.0, "ok"),
        CallSpan(4.2, 0.4, 0.0, "invalid"),
        CallSpan(5.0, 0.3, 0.0, "unavailable"),
    ]


def _page(report: dict[str, Any], custom: CustomTable | None = None) -> PageInput:
    """A page whose every chart says something (each rule of chart_rules is passed)."""
    cost = [CostRow("extract", 10, 800, 100, None), CostRow("synthesize", 4, 90, 10, None)]
    answered = [CallSpan(2.0 + i / 10, 0.1 + i / 50, 0.0, "ok") for i in range(8)]
    return PageInput(
        report=report,
        status="completed",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        finished_at=datetime(2026, 1, 1, 0, 1, tzinfo=UTC),
        calls=_calls() + answered,
        by_stage=cost,
        by_model=[CostRow(f"model {HOSTILE}", 10, 790, 100, None), CostRow("sim-2", 4, 100, 10, None)],
        slowest=[SlowDocument(f"/in/{HOSTILE}.txt", "extracted", 3.5, 4, 2)],
        custom=custom,
    )


def _hostile_documents() -> list[dict[str, Any]]:
    return [
        _document(
            f"/in/{HOSTILE}.txt",
            f"{HOSTILE} $5 $ Corp",
            2.5e9,
            injection_excerpt=f"ignore {HOSTILE}",
            quotes_grounded=4,
        ),
        _document(
            "/in/b.txt", "Beta Inc.", 7.0e8, revenue_grounded=False, risk_titles=[HOSTILE, "Interest rates"]
        ),
        {**_document("/in/c.txt", None, None), "status": "failed", "error": f"schema: {HOSTILE}"},
    ]


def test_every_string_from_a_filing_or_model_is_text_and_the_page_loads_nothing() -> None:
    page = render_page(_page(_report(_hostile_documents())))
    assert "<script" not in page.lower() and "<img" not in page.lower() and "<a " not in page
    assert "javascript:" not in page.replace("javascript:alert(1)&quot;", "")
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' in page
    # The only references are the charts' own (#id); nothing names another resource.
    references = re.findall(r"""(?:href|src|srcset|action)\s*=\s*["']([^"']*)""", page)
    assert all(ref.startswith("#") for ref in references), references
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', ""
    )
    assert "@import" not in page and "url(http" not in page


def test_the_page_has_the_reports_content_and_charts() -> None:
    page = render_page(_page(_report(_hostile_documents())))
    for anchor in ("answer", "filings", "revenue", "risks", "grounding", "not-extracted", "calls"):
        assert f'<section id="{anchor}">' in page
    ids = set(re.findall(r'<svg [^>]*id="(chart-[a-z]+)"', page))
    assert ids == {
        "chart-revenue",
        "chart-risks",
        "chart-grounding",
        "chart-timeline",
        "chart-latency",
        "chart-cost",
    }
    for name, choice in page_charts(_page(_report(_hostile_documents()))).items():
        assert isinstance(choice, Drawn), (name, choice)
        assert not readable_problems(choice.figure), readable_problems(choice.figure)
    assert "unverified: $700.0M?" in page and "SIMULATED RUN" in page
    assert "Injection warnings" in page and "Slowest documents" in page
    assert "Supply chain disruption" in page and "Tokens: no price is configured" in page
    assert "14 calls sent, 1 refused with 429" in page
    assert "$5 $ Corp" in page, "a dollar sign in a label is text, not mathtext"
    assert "files under /in/" in page and "<td>b.txt</td>" in page, "paths relative to the batch's directory"


def test_a_custom_schema_run_shows_its_fields_instead_of_the_10k_columns() -> None:
    data = {
        "company": "Acme",
        "segments": [{"name": "Alpha", "quote": "Alpha sells."}, {"name": HOSTILE, "quote": "Made up."}],
        "_grounding": [
            {"path": "segments[0].quote", "grounded": True, "start": 0, "end": 12},
            {"path": "segments[1].quote", "grounded": False, "start": None, "end": None},
        ],
    }
    documents = [_document("/in/a.txt", None, None, risk_titles=[], quotes_total=2, quotes_grounded=1)]
    custom = CustomTable("tests.custom_schema:SegmentFacts", ["company", "segments"], [("/in/a.txt", data)])
    page = render_page(_page(_report(documents), custom))
    header = re.search(r'<section id="filings">.*?<thead>(.*?)</thead>', page, re.S)
    assert header is not None
    assert [re.sub("<[^>]+>", "", c) for c in re.findall(r"<th>.*?</th>", header.group(1))] == [
        "File",
        "company",
        "segments",
        "Quotes found",
    ]
    assert "name: Alpha; name: &lt;script&gt;" in page and "(unverified)" in page
    assert "Fiscal year" not in page and 'id="chart-revenue"' not in page


def test_calls_in_flight_and_waiting_are_peaks_per_bin() -> None:
    assert peak_levels([(0.2, 2.5), (0.5, 0.9), (1.1, 1.4)], bins=3, bin_s=1) == [2, 2, 1]
    assert peak_levels([], bins=2, bin_s=1) == [0, 0]
    timeline = build_timeline(_calls())
    assert timeline is not None and timeline.bin_s == 1 and len(timeline.starts_s) == 5
    assert timeline.sent_per_s["answered"] == [2.0, 0.0, 0.0, 2.0, 0.0]
    assert timeline.sent_per_s["429"] == [0.0, 1.0, 0.0, 0.0, 0.0]
    assert timeline.sent_per_s["error"] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert timeline.waiting[1] == 1 and timeline.waiting[2] == 1


def test_a_pause_runs_from_a_429_to_the_next_call_sent() -> None:
    assert pauses_after_429(_calls()) == [(1.5, 3.5)]
    close = [CallSpan(1.0, 0.5, 0, "rate_limited"), CallSpan(1.2, 0.1, 0, "ok")]
    assert pauses_after_429(close) == [], "a call sent 0.1 s after the 429 is no pause"
    long_run = build_timeline([CallSpan(3000.0, 1.0, 0.0, "ok")])
    assert long_run is not None and long_run.bin_s == 5 and len(long_run.starts_s) == 600


def test_percentiles_by_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.95) == 4.0
    assert percentile([], 0.5) is None


def test_the_quota_line_is_the_configured_or_learned_limit_of_the_scopes_used() -> None:
    settings = Settings(rate_limit_rpm=600, llm_api_key="k")
    found = quota([], {"m"}, settings)
    assert found is not None and found.per_s == 10.0 and "configured" in found.label
    views = [
        {"model": "m", "rpm": 0, "learned_rpm": 1200, "limits_from": "learned from headers"},
        {"model": "other", "rpm": 0, "learned_rpm": 60, "limits_from": "learned from headers"},
    ]
    learned = quota(views, {"m"}, Settings(llm_api_key="k"))
    assert learned is not None and learned.per_s == 20.0 and "learned from headers" in learned.label
    assert quota([], {"m"}, Settings(llm_api_key="k")) is None


def test_the_page_counts_the_calls_now_and_says_how_many_came_after_the_report() -> None:
    from pipeline.storage.llm_calls import CallTotals

    page = _page(_report(_hostile_documents()))
    page.totals = CallTotals(calls=7, prompt_tokens=900, completion_tokens=150, cost_usd=None, priced_calls=0)
    assert " · 7 LLM calls, 1,050 tokens (1 recorded after the report was written) · " in render_page(page)
    page.totals = CallTotals(calls=6, prompt_tokens=900, completion_tokens=100, cost_usd=None, priced_calls=0)
    assert "recorded after" not in render_page(page)
    page.report["totals"]["synthesis_copies_running"] = 1  # still running as the page is made
    assert "1 synthesis copy was still running when this report was written" in render_page(page)


def test_a_report_written_before_a_hedged_copy_ended_says_so() -> None:
    from pipeline.reporting.render import ReportInput, markdown

    totals = {"documents": {"extracted": 1}, "llm_calls": 5, "tokens": 900, "synthesis_copies_running": 1}
    report = ReportInput("r" * 32, None, "q", "sim-1", True, "answer", 1, [], totals)
    assert (
        "5 LLM calls, 900 tokens · 1 synthesis copy was still running when this report was written: "
        "its calls are recorded after these totals" in markdown(report)
    )
    assert "still running" not in markdown(
        ReportInput(**{**report.__dict__, "totals": {**totals, "synthesis_copies_running": 0}})
    )
