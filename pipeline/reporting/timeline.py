"""A run's LLM calls over time (pure): calls sent per second by outcome, 429s, the pauses after
them, and the calls in flight and waiting in the limiter, in bins a chart can draw.

`llm_calls.created_at` is when a call ended and `latency_ms` how long it took, so a call was
sent (admitted by the limiter) at `end - latency` and waited `limiter_wait_ms` before that.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pipeline.core.constants import CALL_HELD

MAX_BINS = 600
"""A chart of a long run keeps at most this many bars: bins grow from 1 s as the run does."""
PAUSE_MIN_S = 0.25
"""A gap after a 429 shorter than this is the ordinary spacing of calls, not a pause."""
OUTAGE_GAP_S = 5.0
"""Held calls less than this apart belong to one outage (a probe's answer comes in between)."""
OUTCOMES = ("answered", "429", "error")
"""How a sent call ended: the provider answered (valid or not), refused it, or it failed. A
call the endpoint's open circuit held ("held") was never sent, so it is in none of them."""


@dataclass(frozen=True)
class CallSpan:
    end_s: float
    """When the call ended, in seconds since the run was created."""
    latency_s: float
    wait_s: float
    """How long it waited in the limiter before it was sent."""
    status: str
    """llm_calls.status: ok | invalid | rate_limited | unavailable | rejected | circuit_open."""

    @property
    def sent_s(self) -> float:
        return self.end_s - self.latency_s

    @property
    def outcome(self) -> str:
        if self.status == CALL_HELD:
            return "held"
        if self.status == "rate_limited":
            return "429"
        return "answered" if self.status in ("ok", "invalid") else "error"


@dataclass
class Timeline:
    bin_s: int
    starts_s: list[float]
    """The start of each bin, in seconds since the run was created."""
    sent_per_s: dict[str, list[float]] = field(default_factory=dict)
    """Calls sent in each bin, per second, by outcome (OUTCOMES)."""
    in_flight: list[int] = field(default_factory=list)
    """The most calls in flight at once within each bin."""
    waiting: list[int] = field(default_factory=list)
    """The most calls waiting in the limiter at once within each bin."""
    pauses: list[tuple[float, float]] = field(default_factory=list)
    """After a 429, until the next call was sent (every worker waits out the shared pause)."""
    outages: list[tuple[float, float]] = field(default_factory=list)
    """While the endpoint's circuit was open: the spans its held calls waited, merged."""


def bin_seconds(duration_s: float, max_bins: int = MAX_BINS) -> int:
    return max(1, math.ceil(duration_s / max_bins))


def build_timeline(spans: Sequence[CallSpan], max_bins: int = MAX_BINS) -> Timeline | None:
    """The calls sent, binned over the run; None when none was sent (calls held by an open
    circuit were not)."""
    calls = [c for c in spans if c.outcome != "held"]
    if not calls:
        return None
    end_s = max(c.end_s for c in calls)
    bin_s = bin_seconds(end_s, max_bins)
    bins = max(1, math.ceil(end_s / bin_s))
    sent = {outcome: [0.0] * bins for outcome in OUTCOMES}
    for call in calls:
        index = min(bins - 1, max(0, int(call.sent_s // bin_s)))
        sent[call.outcome][index] += 1.0 / bin_s
    return Timeline(
        bin_s=bin_s,
        starts_s=[float(i * bin_s) for i in range(bins)],
        sent_per_s=sent,
        in_flight=peak_levels(((c.sent_s, c.end_s) for c in calls), bins, bin_s),
        waiting=peak_levels(((c.sent_s - c.wait_s, c.sent_s) for c in calls if c.wait_s > 0), bins, bin_s),
        pauses=pauses_after_429(calls),
        outages=outage_spans(spans),
    )


def outage_spans(spans: Sequence[CallSpan], gap_s: float = OUTAGE_GAP_S) -> list[tuple[float, float]]:
    """The spans the calls an open circuit held waited (from when each was held to when it was
    recorded), merged where less than `gap_s` apart: the endpoint's outages as the run saw them."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted((c.end_s - c.wait_s, c.end_s) for c in spans if c.outcome == "held"):
        if merged and start <= merged[-1][1] + gap_s:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def peak_levels(intervals: Iterable[tuple[float, float]], bins: int, bin_s: int) -> list[int]:
    """For each bin, the most intervals open at once within it (a sweep over their ends)."""
    spans = [(start, end) for start, end in intervals if end > start]
    events = sorted(
        [(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans],
        key=lambda event: (event[0], event[1]),  # an end before a start at the same moment
    )
    peaks = [0] * bins
    level = 0
    cursor = 0  # the first bin not yet given the level carried into it
    for moment, step in events:
        index = min(bins - 1, max(0, int(moment // bin_s)))
        while cursor < index:  # bins the sweep passed without an event keep the level
            cursor += 1
            peaks[cursor] = max(peaks[cursor], level)
        level += step
        peaks[index] = max(peaks[index], level)
    return peaks


def pauses_after_429(calls: Sequence[CallSpan], min_s: float = PAUSE_MIN_S) -> list[tuple[float, float]]:
    """Spans from each 429 to the next call sent, when longer than `min_s`, merged."""
    sent = sorted(c.sent_s for c in calls)
    spans: list[tuple[float, float]] = []
    for refused in sorted(c.end_s for c in calls if c.outcome == "429"):
        after = bisect.bisect_right(sent, refused)
        if after == len(sent) or sent[after] - refused < min_s:
            continue
        start, end = refused, sent[after]
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def percentile(values: Sequence[float], share: float) -> float | None:
    """The value below which `share` of `values` lie (nearest rank); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]
