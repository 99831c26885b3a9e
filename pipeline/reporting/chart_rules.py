"""When a chart of the report says something, and the sentence that stands in for it when it
does not (pure).

A chart is read at a glance, so one that says nothing misleads: twenty equal bars look like a
finding, empty axes labelled "0" look like data, a band of 3.8 to 4.2 with no line in it looks
like a broken page. Each chart is drawn only when its data pass its rule below; otherwise the
page says in one sentence what the chart would have shown; with no data at all, neither.

- Bars (revenue by company, risk factors by the filings naming them, quotes found per filing,
  cost per stage and per model): drawn when there are at least two bars and their values
  differ. One bar, or bars all equal, is a sentence giving the value; no bars, nothing. The
  cost figure leaves out a panel that fails the rule (its sentence goes above the figure), is a
  sentence when both do, and one sentence when the calls used no tokens at all; the table
  under it keeps every number.
- The calls over time: drawn when the calls were sent over at least `MIN_TIME_BINS` of the
  timeline's bins (a second each; longer in a long run), from the first one holding a call to
  the last. A shorter span is a sentence saying when they were sent and how they ended. Both
  panels label their time axis; the calls in flight are stairs (a single bin is a step too)
  on a y axis from 0 to above their peak, so a level that never changes is a visible line.
- Latency: a histogram of at least `MIN_LATENCIES` answered calls whose latencies differ; fewer,
  or all the same, is a sentence with their range and median; none answered, a sentence.
- Every drawn chart has a title and an x and a y label on each of its axes, and its value axes
  start at 0 (tests/test_report_browser.py checks this on the figures of real runs).
- A failed run follows the same rules, so its charts are readable or absent: nothing extracted
  means no filings charts, every call failing means no latency or cost chart, a run that
  failed within a second or two has no timeline. Its failures come first, right under the
  banner, with their reasons grouped and counted (`pipeline.reporting.html`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from matplotlib.figure import Figure

from pipeline.reporting import charts
from pipeline.reporting.html_parts import Html, figure, join, note
from pipeline.reporting.page_data import CostRow, PageInput
from pipeline.reporting.render import money
from pipeline.reporting.timeline import CallDigest, Timeline, percentile_of

MIN_TIME_BINS = 3
"""The calls over time are charted when they were sent over at least this many bins."""
MIN_LATENCIES = 10
"""A latency histogram needs at least this many answered calls."""
TOP_RISKS = 15
LISTED_TITLES = 5
"""A sentence standing in for the risk factors chart names at most this many."""
_RELATIVE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Drawn:
    """A chart worth drawing: its figure, caption, and sentences for the parts left out."""

    name: str
    figure: Figure
    caption: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Said:
    """A chart that would say nothing, and the sentence that says it instead."""

    name: str
    sentence: str


Choice = Drawn | Said


def show(choice: Choice | None) -> Html:
    """The chart as a figure, or its sentence; nothing for None."""
    if choice is None:
        return Html("")
    if isinstance(choice, Said):
        return note(choice.sentence)
    return join([*(note(n) for n in choice.notes), figure(charts.to_svg(choice.figure), choice.caption)])


def flat(values: Sequence[float]) -> str | None:
    """Why bars of `values` would say nothing: "none", "one" or "equal"; None when they differ."""
    if not values:
        return "none"
    if len(values) == 1:
        return "one"
    largest = max(abs(v) for v in values)
    return "equal" if max(values) - min(values) <= _RELATIVE_TOLERANCE * largest else None


def page_charts(page: PageInput) -> dict[str, Choice | None]:
    """Every chart of the page by name, as the page shows it (tests read this)."""
    r = page.report
    return {
        "revenue": revenue(r),
        "risks": risks(r),
        "grounding": grounding(r),
        "timeline": timeline(page),
        "latency": latency(page),
        "cost": cost(page),
    }


# The filings


def extracted(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's extracted documents; none when the report lists only some of them (a run
    past its listing: a chart of some filings would read as one of all)."""
    if r.get("documents_complete") is False:
        return []
    return [d for d in r.get("documents", []) if d.get("status") == "extracted"]


def label(d: dict[str, Any]) -> str:
    return str(d.get("company") or PurePath(str(d.get("path", ""))).name)


def revenue(r: dict[str, Any]) -> Choice | None:
    bars = [
        (label(d), float(d["revenue_usd"]), d.get("revenue_grounded") is False)
        for d in extracted(r)
        if d.get("revenue_usd") is not None
    ]
    why = flat([v for _, v, _ in bars])
    if why == "none":
        return None
    if why == "one":
        name, value, unverified = bars[0]
        flag = " (unverified: its quote is not in the filing)" if unverified else ""
        return Said("revenue", f"Only {name} has a revenue: {money(value)}{flag}.")
    if why == "equal":
        return Said("revenue", f"All {len(bars)} companies have the same revenue: {money(bars[0][1])}.")
    caption = "Hatched bars: the revenue's quote was not found in the filing (unverified)."
    return Drawn("revenue", charts.revenue_chart(bars), caption)


def risks(r: dict[str, Any]) -> Choice | None:
    filings: Counter[str] = Counter()
    shown: dict[str, str] = {}
    for d in extracted(r):
        for title in d.get("risk_titles") or []:
            shown.setdefault(" ".join(title.split()).lower(), " ".join(title.split()))
        for key in dict.fromkeys(" ".join(t.split()).lower() for t in d.get("risk_titles") or []):
            filings[key] += 1
    top = filings.most_common(TOP_RISKS)
    why = flat([float(n) for _, n in top])
    if why == "none":
        return None
    if why == "one":
        key, n = top[0]
        return Said("risks", f"One risk factor across the run: {shown[key]} ({_filings(n)}).")
    if why == "equal":
        titles = [shown[key] for key, _ in top[:LISTED_TITLES]]
        more = ", …" if len(filings) > LISTED_TITLES else ""
        return Said(
            "risks",
            f"No risk factor stands out: each of the {len(filings)} is named by {_filings(top[0][1])} "
            f"({', '.join(titles)}{more}).",
        )
    bars = [(shown[key], float(n), False) for key, n in top]
    fig = charts.hbar(
        "risks",
        "Most frequent risk factors",
        bars,
        xlabel="filings naming it",
        ylabel="risk factor",
        fmt=lambda v: f"{v:.0f}",
        counts=True,
    )
    caption = (
        "Filings naming each risk factor (grounded quotes only; titles compared case-insensitively), "
        f"top {len(top)} of {len(filings)}."
    )
    return Drawn("risks", fig, caption)


def _filings(n: int) -> str:
    return "1 filing" if n == 1 else f"{n} filings"


def grounding(r: dict[str, Any]) -> Choice | None:
    rated = sorted(
        (d for d in extracted(r) if d.get("quotes_total")),
        key=lambda d: d["quotes_grounded"] / d["quotes_total"],
    )
    shares = [d["quotes_grounded"] / d["quotes_total"] for d in rated]
    why = flat(shares)
    if why == "none":
        return None
    if why == "one":
        d = rated[0]
        return Said(
            "grounding",
            f"{label(d)}: {d['quotes_grounded']} of {d['quotes_total']} quotes found in its text "
            f"({shares[0]:.0%}).",
        )
    if why == "equal":
        if shares[0] == 1:
            return Said(
                "grounding", f"Every quote of the {len(rated)} filings was found in its filing's text."
            )
        return Said(
            "grounding",
            f"Each of the {len(rated)} filings had {shares[0]:.0%} of its quotes found in its text.",
        )
    bars = [
        (label(d), share, bool(d.get("injection_excerpt"))) for d, share in zip(rated, shares, strict=True)
    ]
    fig = charts.hbar(
        "grounding",
        "Quotes found in their filing, per filing (lowest first)",
        bars,
        xlabel="share of the filing's quotes found in its text",
        ylabel="filing",
        fmt=lambda v: f"{v:.0%}",
        flagged_label="injection warning",
        xlim=(0.0, 1.15),
    )
    return Drawn("grounding", fig, "Hatched bars: the filing holds text that addresses a language model.")


# The LLM calls


def timeline(page: PageInput) -> Choice | None:
    digest = page.call_digest()
    binned = digest.timeline
    if binned is None:
        return None
    busy = [i for i, _ in enumerate(binned.starts_s) if any(s[i] for s in binned.sent_per_s.values())]
    if busy[-1] - busy[0] + 1 < MIN_TIME_BINS:
        return Said("timeline", _short_timeline(digest, binned, busy))
    quota = page.quota
    fig = charts.timeline_chart(binned, quota.per_s if quota else None, quota.label if quota else "")
    caption = (
        "A call counts in the second it was sent (when it ended less its latency); shaded: after a 429, "
        "until the next call was sent."
    )
    return Drawn("timeline", fig, caption)


def _short_timeline(digest: CallDigest, binned: Timeline, busy: list[int]) -> str:
    span_s = (busy[-1] - busy[0] + 1) * binned.bin_s
    outcomes = digest.outcomes  # of the calls sent: a held call was never sent
    ended = ", ".join(
        f"{outcomes[o]:,} {word}"
        for o, word in (("answered", "answered"), ("429", "refused with 429"), ("error", "failed"))
        if outcomes[o]
    )
    first, last = max(0.0, digest.first_sent_s), max(0.0, digest.last_sent_s)
    calls = "The one LLM call was" if digest.sent == 1 else f"All {digest.sent:,} LLM calls were"
    when = f"{first:.1f} s" if digest.sent == 1 else f"between {first:.1f} s and {last:.1f} s"
    return (
        f"{calls} sent within {span_s} s, {when} after the run was submitted: too short a time for a "
        f"chart of calls per second. {ended.capitalize()}."
    )


def latency(page: PageInput) -> Choice | None:
    digest = page.call_digest()
    if not digest.recorded:
        return None
    answered = digest.latencies_s
    if not answered:
        return Said("latency", "No call was answered, so there is no latency to show.")
    n, fastest, slowest = sum(answered.values()), min(answered), max(answered)
    p50, p95 = percentile_of(answered, 0.5), percentile_of(answered, 0.95)
    if n < MIN_LATENCIES or slowest - fastest < 0.001:
        if n == 1:
            return Said("latency", f"The one answered call took {fastest:.2f} s.")
        return Said(
            "latency",
            f"The {n} answered calls took {fastest:.2f} s to {slowest:.2f} s (median {p50:.2f} s).",
        )
    caption = "Time from sending a call to its answer, for the calls the provider answered."
    return Drawn("latency", charts.histogram_chart(answered, p50, p95), caption)


def cost(page: PageInput) -> Choice | None:
    if not page.call_digest().recorded and not page.by_stage:
        return None
    priced = any(r.cost_usd is not None for r in page.by_stage)

    def value(row: CostRow) -> float:
        return (row.cost_usd or 0.0) if priced else float(row.prompt_tokens + row.completion_tokens)

    def fmt(v: float) -> str:
        if not priced:
            return f"{v:,.0f}"
        return "<$0.0001" if 0 < v < 0.0001 else f"${v:,.4f}"

    rows = {"stage": page.by_stage, "model": page.by_model}
    every = [*page.by_stage, *page.by_model]
    if not any(value(r) for r in every):
        used = any(r.prompt_tokens or r.completion_tokens for r in every)
        spent = "cost nothing" if used else "used no tokens"  # a failed call costs nothing either
        return Said("cost", f"The run's calls {spent}, so there is nothing to compare per stage or model.")
    panels, notes = [], []
    for kind, found in rows.items():
        sentence = _flat_costs(kind, [(r.key, value(r)) for r in found], fmt, priced)
        if sentence is None:
            panels.append((f"per {kind}", kind, [(r.key, value(r)) for r in found]))
        elif sentence:
            notes.append(sentence)
    if not panels:
        return Said("cost", " ".join(notes))
    xlabel = "cost (USD)" if priced else "tokens (prompt + completion)"
    fig = charts.breakdown_chart("cost", panels, xlabel, fmt)
    caption = (
        "Cost in USD at each model's price (the shipped list prices, or PIPELINE_LLM_PRICES)."
        if priced
        else "Tokens: no price is configured for these models (PIPELINE_LLM_PRICES), so no cost."
    )
    return Drawn("cost", fig, caption, tuple(notes))


def _flat_costs(
    kind: str, bars: list[tuple[str, float]], fmt: Callable[[float], str], priced: bool
) -> str | None:
    """The sentence for a cost panel that would say nothing ("" for no bars), None to draw it."""
    why = flat([v for _, v in bars])

    def amount(v: float) -> str:
        return fmt(v) if priced else f"{fmt(v)} tokens"

    if why == "none":
        return ""
    if why == "one":
        key, v = bars[0]
        return (
            f"Every call was of the {key} stage: {amount(v)}."
            if kind == "stage"
            else f"Every call went to {key}: {amount(v)}."
        )
    if why == "equal":
        keys = ", ".join(key for key, _ in bars)
        return f"The {len(bars)} {kind}s ({keys}) each came to {amount(bars[0][1])}."
    return None
