"""Charts of a run as inline SVG (pure): matplotlib's SVG backend, no pyplot, no JavaScript.

Text stays text (`svg.fonttype` none) in a generic sans-serif family, so the page loads no
font; matplotlib escapes it as XML, and with math parsing off a `$` in a company name is
only a dollar sign. Each chart's ids are salted with its name, so that several charts inline
in one page never share an id, and the output is the same for the same data.

The functions here draw a `Figure` (named by its label) and `to_svg` writes it, so that what a
chart shows (titles, axis labels, ranges) can be checked on the figure itself; whether a chart
is drawn at all is decided in `pipeline.reporting.chart_rules`. Every axes has a title and an x
and a y label, and a value axis starts at 0.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from pipeline.reporting.render import money
from pipeline.reporting.timeline import Timeline

MAX_BARS = 25
"""A bar chart shows at most this many bars (the table below it has every row)."""
LABEL_CHARS = 42
WIDTH_IN = 7.5
COLORS = {"main": "#3b6ea5", "muted": "#b8c2cc", "bad": "#c0392b", "warn": "#e08e0b", "line": "#222"}
OUTCOME_COLORS = {"answered": COLORS["main"], "429": COLORS["bad"], "error": COLORS["warn"]}
_STYLE: dict[str, Any] = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.size": 9,
    "text.parse_math": False,
    "text.usetex": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
}
_LEGEND_RIGHT: dict[str, Any] = {
    "loc": "upper left",
    "bbox_to_anchor": (1.01, 1.0),
    "fontsize": 8,
    "frameon": False,
}
_NO_METADATA: dict[str, Any] = {"Creator": None, "Date": None, "Format": None, "Type": None}


def _rc(name: str) -> Any:
    """The style, with ids salted by and the root `<svg>` named after the chart."""
    return {**_STYLE, "svg.hashsalt": name, "svg.id": f"chart-{name}"}


@contextmanager
def chart(
    name: str,
    height_in: float,
    cols: int = 1,
    *,
    width_in: float = WIDTH_IN,
    width_ratios: Sequence[float] | None = None,
) -> Iterator[tuple[Figure, list[Any]]]:
    """A figure of `cols` side-by-side axes, styled, whose SVG ids are salted with `name`."""
    with matplotlib.rc_context(_rc(name)):
        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        fig.set_label(name)
        axes = fig.subplots(1, cols, squeeze=False, width_ratios=width_ratios)[0].tolist()
        yield fig, axes


def to_svg(fig: Figure) -> str:
    """The figure as an `<svg>` element, without the XML prolog and DOCTYPE (it goes inline),
    its ids salted with the figure's label (the chart's name)."""
    out = io.StringIO()
    with matplotlib.rc_context(_rc(str(fig.get_label()))):
        fig.savefig(out, format="svg", metadata=_NO_METADATA)
    text = out.getvalue()
    return text[text.index("<svg") :]


def short(label: str, limit: int = LABEL_CHARS) -> str:
    flat = " ".join(label.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _bars_height(count: int) -> float:
    return 0.9 + 0.2 * count


def hbar(
    name: str,
    title: str,
    bars: Sequence[tuple[str, float, bool]],
    *,
    xlabel: str,
    ylabel: str,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    flagged_label: str = "",
    xlim: tuple[float, float] | None = None,
    counts: bool = False,
) -> Figure:
    """Horizontal bars, top to bottom in the given order; a flagged bar is hatched and muted."""
    shown = list(bars[:MAX_BARS])
    with chart(name, _bars_height(len(shown))) as (fig, (ax,)):
        rows = list(range(len(shown)))[::-1]
        colors = [COLORS["muted"] if flagged else COLORS["main"] for _, _, flagged in shown]
        hatches = ["//" if flagged else "" for _, _, flagged in shown]
        edges = ["#56616c" if flagged else "white" for _, _, flagged in shown]
        drawn = ax.barh(rows, [v for _, v, _ in shown], color=colors, hatch=hatches, edgecolor=edges)
        ax.set_yticks(rows, [short(label) for label, _, _ in shown])
        ax.bar_label(drawn, labels=[fmt(v) for _, v, _ in shown], padding=3, fontsize=8)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=counts))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if xlim:
            ax.set_xlim(*xlim)
        else:
            ax.margins(x=0.18)
            ax.set_xlim(left=0)
        more = f" (first {len(shown)} of {len(bars)})" if len(bars) > len(shown) else ""
        ax.set_title(title + more)
        if flagged_label and any(flagged for _, _, flagged in shown):
            fig.legend(
                handles=[drawn.patches[colors.index(COLORS["muted"])]],
                labels=[flagged_label],
                loc="outside lower right",
                fontsize=8,
                frameon=False,
            )
        return fig


def revenue_chart(bars: Sequence[tuple[str, float, bool]]) -> Figure:
    """(company, revenue USD, unverified) bars, largest first."""
    ordered = sorted(bars, key=lambda bar: -bar[1])
    return hbar(
        "revenue",
        "Revenue by company",
        ordered,
        xlabel="revenue (USD)",
        ylabel="company",
        fmt=lambda v: money(v) if v else "0",
        flagged_label="unverified: its quote is not in the filing",
    )


TIME_LABEL = "seconds since the run was submitted"


def timeline_chart(timeline: Timeline, quota_per_s: float | None, quota_label: str) -> Figure:
    """Calls sent per second by outcome against the quota, the pauses after 429s and the
    endpoint's outages (its circuit open: the calls it held); below, the
    calls in flight and those waiting in the limiter, as stairs (one bin is a step too) on a y
    axis from 0 to above their peak, so that a level that never changes is still a line. Both
    panels label their time axis."""
    with matplotlib.rc_context(_rc("timeline")):
        fig = Figure(figsize=(WIDTH_IN, 5.4), layout="constrained")
        fig.set_label("timeline")
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
        x, width = timeline.starts_s, timeline.bin_s
        base = [0.0] * len(x)
        for outcome, series in timeline.sent_per_s.items():
            if any(series):
                label = {"answered": "answered", "429": "refused (429)", "error": "failed"}[outcome]
                top.bar(
                    x, series, width, bottom=base, align="edge", color=OUTCOME_COLORS[outcome], label=label
                )
                base = [b + s for b, s in zip(base, series, strict=True)]
        for index, (start, end) in enumerate(timeline.pauses):
            top.axvspan(
                start,
                end,
                color=COLORS["warn"],
                alpha=0.18,
                zorder=0,
                label="paused after a 429" if not index else None,
            )
        for index, (start, end) in enumerate(timeline.outages):
            top.axvspan(
                start,
                end,
                color=OUTCOME_COLORS["error"],
                alpha=0.12,
                zorder=0,
                label="endpoint down (its circuit open)" if not index else None,
            )
        if quota_per_s:
            top.axhline(quota_per_s, color=COLORS["line"], linestyle="--", linewidth=1, label=quota_label)
        per = "per second" if width == 1 else f"per second, in bins of {width} s"
        top.set_title(f"LLM calls sent {per}")
        top.set_ylabel("calls / s")
        top.set_ylim(bottom=0)
        top.legend(**_LEGEND_RIGHT)
        edges = [*x, x[-1] + width] if x else [0.0, 1.0]
        levels = timeline.in_flight or [0]
        bottom.stairs(levels, edges, color=COLORS["main"], linewidth=1.5, label="in flight")
        if any(timeline.waiting):
            bottom.stairs(
                timeline.waiting, edges, color=COLORS["warn"], linewidth=1.5, label="waiting in the limiter"
            )
        peak = max([*levels, *timeline.waiting, 1])
        bottom.set_ylim(0, peak * 1.2)
        bottom.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        each = "second" if width == 1 else f"{width} s"
        bottom.set_title(f"LLM calls in flight at once (the most in each {each})")
        bottom.set_ylabel("calls")
        bottom.set_xlim(0, edges[-1])
        for ax in (top, bottom):
            ax.set_xlabel(TIME_LABEL)
            ax.tick_params(labelbottom=True)
        bottom.legend(**_LEGEND_RIGHT)
        return fig


def histogram_chart(latencies_s: Mapping[float, int], p50: float | None, p95: float | None) -> Figure:
    """The latency distribution of answered calls ({latency: how many calls took it}), with
    its median and 95th percentile."""
    values = sorted(latencies_s)
    calls = sum(latencies_s.values())
    with chart("latency", 2.6) as (fig, (ax,)):
        counts, _, _ = ax.hist(
            values,
            bins=min(40, max(5, calls // 4)),
            weights=[latencies_s[v] for v in values],
            color=COLORS["main"],
        )
        for value, name in ((p50, "p50"), (p95, "p95")):
            if value is not None:
                ax.axvline(value, color=COLORS["line"], linestyle="--", linewidth=1)
                ax.annotate(
                    f"{name} {value:.2f} s",
                    (value, 1),
                    xycoords=("data", "axes fraction"),
                    xytext=(3, -2),
                    textcoords="offset points",
                    va="top",
                    fontsize=8,
                )
        ax.set_title(f"Latency of answered calls ({calls})")
        ax.set_xlabel("seconds from sending a call to its answer")
        ax.set_ylabel("calls")
        ax.set_ylim(0, max(counts) * 1.2)  # room for the p50 and p95 labels under the top
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        return fig


def breakdown_chart(
    name: str,
    panels: Sequence[tuple[str, str, Sequence[tuple[str, float]]]],
    xlabel: str,
    fmt: Callable[[float], str],
) -> Figure:
    """Side-by-side horizontal bars, one panel per (title, y label, [(label, value)]); the bars
    carry their values, so the value axis has its label but no ticks."""
    tallest = max((len(bars) for _, _, bars in panels), default=1)
    with chart(name, _bars_height(min(tallest, MAX_BARS)) + 0.3, cols=len(panels)) as (fig, axes):
        for ax, (title, ylabel, bars) in zip(axes, panels, strict=True):
            shown = list(bars[:MAX_BARS])
            rows = list(range(len(shown)))[::-1]
            drawn = ax.barh(rows, [v for _, v in shown], color=COLORS["main"])
            ax.set_yticks(rows, [short(label, 24) for label, _ in shown])
            ax.bar_label(drawn, labels=[fmt(v) for _, v in shown], padding=3, fontsize=8)
            ax.set_xticks([])
            ax.spines["bottom"].set_visible(False)
            ax.margins(x=0.3)
            ax.set_xlim(left=0)
            ax.set_title(title)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
        return fig
