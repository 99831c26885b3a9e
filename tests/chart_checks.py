"""What every chart of the report must show to be readable, checked on its matplotlib figure:
each axes has a title, an x and a y label and tick labels, limits that are ranges (not a
point) holding its data, and a value axis from 0 (a constant series is then a line above
the axis, not a band of 3.8 to 4.2 with nothing in it); a line has at least two points."""

from __future__ import annotations

from typing import Any

from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import StepPatch


def _shown(labels: list[Any]) -> list[str]:
    return [t.get_text() for t in labels if t.get_visible() and t.get_text()]


def _horizontal_bars(ax: Any) -> bool:
    return any(isinstance(c, BarContainer) and c.orientation == "horizontal" for c in ax.containers)


def readable_problems(fig: Figure) -> list[str]:
    """Everything that keeps `fig` from being read at a glance (empty: nothing)."""
    fig.draw_without_rendering()  # tick labels are made when the figure is drawn
    problems = []
    for index, ax in enumerate(fig.axes):
        where = f"{fig.get_label()} axes {index}"
        if not (ax.get_title(loc="left") or ax.get_title()):
            problems.append(f"{where}: no title")
        if not ax.get_xlabel() or not ax.get_ylabel():
            problems.append(f"{where}: x label {ax.get_xlabel()!r}, y label {ax.get_ylabel()!r}")
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        if not (x1 > x0 and y1 > y0):
            problems.append(f"{where}: limits x {x0}..{x1}, y {y0}..{y1}")
        data = ax.dataLim
        if data.x1 > x1 + 1e-9 or data.y1 > y1 + 1e-9:
            problems.append(f"{where}: data up to ({data.x1}, {data.y1}) beyond x {x1}, y {y1}")
        horizontal = _horizontal_bars(ax)
        start = x0 if horizontal else y0
        if start != 0:
            problems.append(f"{where}: the value axis starts at {start}, not 0")
        if not _shown(ax.get_yticklabels()):
            problems.append(f"{where}: no y tick labels")
        if not horizontal and not _shown(ax.get_xticklabels()):
            problems.append(f"{where}: no x tick labels")  # bars carry their values when horizontal
        for line in ax.get_lines():
            if isinstance(line, Line2D) and len(line.get_xdata()) < 2:
                problems.append(f"{where}: a line of one point ({line.get_label()})")
        drawn = [p for p in ax.patches if isinstance(p, StepPatch)] + [
            b for c in ax.containers if isinstance(c, BarContainer) for b in c
        ]
        if not drawn and not [line for line in ax.get_lines() if len(line.get_xdata()) >= 2]:
            problems.append(f"{where}: nothing drawn")
    return problems
