"""The page's picture of the night (pure): the LLM calls over time against the quota, their
latency, what each stage and model cost, and the slowest documents."""

from __future__ import annotations

from pipeline.reporting import charts
from pipeline.reporting.html_parts import Html, figure, join, note, section, table, tag
from pipeline.reporting.page_data import CostRow, PageInput
from pipeline.reporting.timeline import build_timeline, percentile


def calls_section(page: PageInput) -> Html:
    if not page.calls:
        return section("calls", "LLM calls", note("No LLM call was recorded for this run."))
    return section(
        "calls", "LLM calls over the run", _timeline(page), _latency(page), _costs(page), _slowest(page)
    )


def _timeline(page: PageInput) -> Html:
    timeline = build_timeline(page.calls)
    if timeline is None:
        return Html("")
    refused = sum(1 for c in page.calls if c.outcome == "429")
    waited_s = sum(c.wait_s for c in page.calls)
    quota = page.quota
    summary = (
        f"{len(page.calls):,} calls, {refused:,} refused with 429 ({refused / len(page.calls):.1%}), "
        f"{len(timeline.pauses)} pauses after a 429, at most {max(timeline.in_flight)} in flight at once; "
        f"{waited_s:,.1f} s waited in the limiter in all. "
        + (
            f"The dashed line is the request quota the run's calls shared ({quota.label})."
            if quota
            else "No request quota was configured or learned from the provider's headers."
        )
    )
    svg = charts.timeline_chart(timeline, quota.per_s if quota else None, quota.label if quota else "")
    caption = (
        "A call counts in the second it was sent (when it ended less its latency); shaded: after a 429, "
        "until the next call was sent."
    )
    return join([note(summary), figure(svg, caption)])


def _latency(page: PageInput) -> Html:
    answered = [c.latency_s for c in page.calls if c.outcome == "answered"]
    if not answered:
        return note("No call was answered.")
    p50, p95 = percentile(answered, 0.5), percentile(answered, 0.95)
    svg = charts.histogram_chart(answered, p50, p95)
    return figure(svg, "Time from sending a call to its answer, for the calls the provider answered.")


def _costs(page: PageInput) -> Html:
    priced = any(r.cost_usd is not None for r in page.by_stage)

    def value(row: CostRow) -> float:
        return (row.cost_usd or 0.0) if priced else float(row.prompt_tokens + row.completion_tokens)

    def fmt(v: float) -> str:
        return f"${v:,.4f}" if priced else f"{v:,.0f}"

    panels = [
        ("per stage", [(r.key, value(r)) for r in page.by_stage]),
        ("per model", [(r.key, value(r)) for r in page.by_model]),
    ]
    svg = charts.breakdown_chart("cost", panels, fmt)
    caption = (
        "Cost in USD by PIPELINE_LLM_PRICES."
        if priced
        else "Tokens: no price is configured for these models (PIPELINE_LLM_PRICES), so no cost."
    )
    headers = ["Stage or model", "Calls", "Prompt tokens", "Completion tokens", "Cost (USD)"]
    rows = [
        [
            r.key,
            r.calls,
            r.prompt_tokens,
            r.completion_tokens,
            "unpriced" if r.cost_usd is None else round(r.cost_usd, 6),
        ]
        for r in [*page.by_stage, *page.by_model]
    ]
    return join([tag("h3", "Cost per stage and per model"), figure(svg, caption), table(headers, rows)])


def _slowest(page: PageInput) -> Html:
    if not page.slowest:
        return Html("")
    rows = [[d.path, d.status, round(d.seconds, 2), d.calls, d.chunks] for d in page.slowest]
    headers = ["File", "Status", "Seconds (start to end)", "LLM calls", "Chunks"]
    return join([tag("h3", "Slowest documents"), table(headers, rows)])
