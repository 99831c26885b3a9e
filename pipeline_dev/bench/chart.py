"""The benchmark's picture, `bench.svg` next to `bench.md`: each regime's wall time against the
least time its quota allows, and our pipeline side by side with the peer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.reporting.charts import COLORS, chart, to_svg

PEERS = {"peer-R1": "R1", "peer-R4": "R4"}
"""A peer result and the regime of ours it ran against (the same filings and simulator)."""


Series = list[tuple[str, list[float | None], str]]
"""(label, one value or None per group, color)."""


def _bars(ax: Any, groups: list[str], series: Series) -> None:
    """Grouped vertical bars; a missing value leaves its slot empty."""
    width = 0.8 / len(series)
    for index, (label, values, color) in enumerate(series):
        slots = [(i, v) for i, v in enumerate(values) if v is not None]
        if not slots:
            continue
        xs = [i - 0.4 + width * (index + 0.5) for i, _ in slots]
        drawn = ax.bar(xs, [v for _, v in slots], width, label=label, color=color)
        ax.bar_label(drawn, labels=[f"{v:,.0f}" for _, v in slots], padding=2, fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel("seconds")
    ax.margins(y=0.12)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=len(series), frameon=False)


def bench_svg(results: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The chart of `results` (bench.json's "results"), or None when no regime has a wall time."""
    ours = [n for n, r in results.items() if n not in PEERS and r.get("wall_s") is not None]
    peers = [(p, PEERS[p]) for p in PEERS if results.get(p, {}).get("wall_s") is not None]
    if not ours and not peers:
        return None
    panels = [p for p in (ours, peers) if p]
    ratios = [max(2, len(ours)), 2 * len(peers)] if len(panels) == 2 else None
    with chart("bench", 3.6, cols=len(panels), width_in=9.0, width_ratios=ratios) as (fig, axes):
        if ours:
            ax = axes[0]
            walls: list[float | None] = [float(results[n]["wall_s"]) for n in ours]
            minimum = [results[n].get("theoretical_min_s") for n in ours]
            series: Series = [("wall", walls, COLORS["main"])]
            if any(m is not None for m in minimum):
                series.append(
                    ("quota minimum", [None if m is None else float(m) for m in minimum], COLORS["muted"])
                )
            _bars(ax, ours, series)
            ax.set_title("Wall time per regime, and its quota minimum")
        if peers:
            ax = axes[-1]
            mine = [results.get(regime, {}).get("wall_s") for _, regime in peers]
            theirs: list[float | None] = [float(results[p]["wall_s"]) for p, _ in peers]
            _bars(
                ax,
                [regime for _, regime in peers],
                [
                    ("this pipeline", [None if m is None else float(m) for m in mine], COLORS["main"]),
                    ("peer", theirs, COLORS["warn"]),
                ],
            )
            ax.set_title("Against the peer")
        return to_svg(fig)
