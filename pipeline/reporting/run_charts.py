"""The page's picture of the night (pure): the LLM calls over time against the quota, their
latency, what each stage and model cost, and the slowest documents. Which of these charts are
drawn, and what is said instead, is `pipeline.reporting.chart_rules`."""

from __future__ import annotations

from pipeline.reporting import chart_rules
from pipeline.reporting.chart_rules import Drawn, show
from pipeline.reporting.html_parts import Html, join, note, section, table, tag
from pipeline.reporting.page_data import PageInput


def calls_section(page: PageInput) -> Html:
    digest = page.call_digest()
    if not digest.recorded and page.pruned_at:
        said = f"The run's call rows were deleted by `pipeline prune` on {page.pruned_at:%Y-%m-%d}."
        return section("calls", "LLM calls", note(said))
    if not digest.recorded:
        return section("calls", "LLM calls", note("No LLM call was recorded for this run."))
    return section(
        "calls",
        "LLM calls over the run",
        _timeline(page),
        _latency(page),
        _costs(page),
        _slowest(page),
    )


def _timeline(page: PageInput) -> Html:
    digest = page.call_digest()
    held = digest.held
    held_text = f" {held:,} more were held by the endpoint's open circuit, never sent." if held else ""
    timeline = digest.timeline
    if timeline is None:
        return note(f"No LLM call was sent.{held_text}")
    choice = chart_rules.timeline(page)
    sent = digest.sent
    refused = digest.outcomes["429"]
    waited_s = digest.waited_s
    quota = page.quota
    if quota is None:
        quota_text = "No request quota was configured or learned from the provider's headers."
    elif isinstance(choice, Drawn):
        quota_text = f"The dashed line is the request quota the run's calls shared ({quota.label})."
    else:
        quota_text = f"The request quota the run's calls shared: {quota.label}."
    down_s = sum(end - start for start, end in timeline.outages)
    outage_text = (
        f" The endpoint was down (its circuit open) for {down_s:,.0f} s in {len(timeline.outages)} "
        f"{'outage' if len(timeline.outages) == 1 else 'outages'}."
        if timeline.outages
        else ""
    )
    summary = (
        f"{sent:,} {'call' if sent == 1 else 'calls'} sent, {refused:,} refused with 429 ({refused / sent:.1%}), "
        f"{len(timeline.pauses)} pauses after a 429, at most {max(timeline.in_flight)} in flight at once; "
        f"{waited_s:,.1f} s waited in the limiter in all.{held_text}{outage_text} {quota_text}"
    )
    return join([note(summary), show(choice)])


def _latency(page: PageInput) -> Html:
    return show(chart_rules.latency(page))


def _costs(page: PageInput) -> Html:
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
    return join(
        [tag("h3", "Cost per stage and per model"), show(chart_rules.cost(page)), table(headers, rows)]
    )


def _slowest(page: PageInput) -> Html:
    if not page.slowest:
        return Html("")
    rows = [[d.path, d.status, round(d.seconds, 2), d.calls, d.chunks] for d in page.slowest]
    headers = ["File", "Status", "Seconds (start to end)", "LLM calls", "Chunks"]
    return join([tag("h3", "Slowest documents"), table(headers, rows)])
