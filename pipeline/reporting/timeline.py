"""A run's LLM calls over time (pure): calls sent per second by outcome, 429s, the pauses after
them, and the calls in flight and waiting in the limiter, in bins a chart can draw.

`llm_calls.created_at` is when a call ended and `latency_ms` how long it took, so a call was
sent (admitted by the limiter) at `end - latency` and waited `limiter_wait_ms` before that.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
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


@dataclass
class CallDigest:
    """What the page says of a run's calls, folded from them in the order they were sent: its
    memory is the timeline's bins, the calls in flight at once and the distinct latencies, not
    the run's calls (`fold_calls`)."""

    timeline: Timeline | None = None
    """None when no call was sent (calls held by an open circuit were not)."""
    held: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    """The sent calls by outcome (OUTCOMES)."""
    waited_s: float = 0.0
    """The sent calls' time in the limiter, in all."""
    first_sent_s: float = 0.0
    last_sent_s: float = 0.0
    latencies_s: Counter[float] = field(default_factory=Counter)
    """How many answered calls took each latency."""

    @property
    def sent(self) -> int:
        return sum(self.outcomes.values())

    @property
    def recorded(self) -> int:
        return self.sent + self.held


def build_timeline(spans: Sequence[CallSpan], max_bins: int = MAX_BINS) -> Timeline | None:
    """The calls sent, binned over the run; None when none was sent (calls held by an open
    circuit were not)."""
    return digest_of(spans, max_bins).timeline


def digest_of(spans: Sequence[CallSpan], max_bins: int = MAX_BINS) -> CallDigest:
    """`fold_calls` over calls in any order (sorted here)."""
    sent = sorted((c for c in spans if c.outcome != "held"), key=lambda c: c.sent_s)
    waited = sorted((c for c in sent if c.wait_s > 0), key=lambda c: c.sent_s - c.wait_s)
    held = sorted((c for c in spans if c.outcome == "held"), key=lambda c: c.end_s - c.wait_s)
    end_s = max((c.end_s for c in sent), default=None)
    return fold_calls(sent, waited, held, end_s, max_bins)


def fold_calls(
    by_sent: Iterable[CallSpan],
    by_queued: Iterable[CallSpan],
    held: Iterable[CallSpan],
    end_s: float | None,
    max_bins: int = MAX_BINS,
) -> CallDigest:
    """The run's calls, each stream read once, in order: `by_sent`, the calls sent (not held)
    in the order they were sent; `by_queued`, those of them that waited in the limiter, in the
    order they began to wait; `held`, the calls an open circuit held, in the order they were
    held. `end_s`: the latest end of a sent call (None: none was sent)."""
    digest = CallDigest()
    outages = _Outages()
    for call in held:
        digest.held += 1
        outages.add(call.end_s - call.wait_s, call.end_s)
    if end_s is None:
        return digest
    bin_s = bin_seconds(end_s, max_bins)
    bins = max(1, math.ceil(end_s / bin_s))
    sent = {outcome: [0.0] * bins for outcome in OUTCOMES}
    in_flight, pauses = _Peaks(bins, bin_s), _Pauses(PAUSE_MIN_S)
    first_s, last_s = math.inf, -math.inf
    for call in by_sent:
        sent[call.outcome][min(bins - 1, max(0, int(call.sent_s // bin_s)))] += 1.0 / bin_s
        in_flight.open(call.sent_s, call.end_s)
        pauses.add(call)
        digest.outcomes[call.outcome] += 1
        digest.waited_s += call.wait_s
        first_s, last_s = min(first_s, call.sent_s), max(last_s, call.sent_s)
        if call.outcome == "answered":
            digest.latencies_s[call.latency_s] += 1
    if not digest.sent:
        return digest
    waiting = _Peaks(bins, bin_s)
    for call in by_queued:
        waiting.open(call.sent_s - call.wait_s, call.sent_s)
    digest.first_sent_s, digest.last_sent_s = first_s, last_s
    digest.timeline = Timeline(
        bin_s=bin_s,
        starts_s=[float(i * bin_s) for i in range(bins)],
        sent_per_s=sent,
        in_flight=in_flight.close(),
        waiting=waiting.close(),
        pauses=pauses.spans,
        outages=outages.spans,
    )
    return digest


class _Peaks:
    """For each bin, the most intervals open at once within it: a sweep over intervals given in
    the order they open, holding only those open (an end before a start at the same moment)."""

    def __init__(self, bins: int, bin_s: int) -> None:
        self.peaks = [0] * bins
        self.bin_s = bin_s
        self.level = 0
        self.cursor = 0  # the first bin not yet given the level carried into it
        self.ends: list[float] = []

    def open(self, start: float, end: float) -> None:
        if end <= start:
            return
        while self.ends and self.ends[0] <= start:
            self._step(heapq.heappop(self.ends), -1)
        self._step(start, 1)
        heapq.heappush(self.ends, end)

    def close(self) -> list[int]:
        while self.ends:
            self._step(heapq.heappop(self.ends), -1)
        return self.peaks

    def _step(self, moment: float, step: int) -> None:
        index = min(len(self.peaks) - 1, max(0, int(moment // self.bin_s)))
        while self.cursor < index:  # bins the sweep passed without an event keep the level
            self.cursor += 1
            self.peaks[self.cursor] = max(self.peaks[self.cursor], self.level)
        self.level += step
        self.peaks[index] = max(self.peaks[index], self.level)


class _Pauses:
    """Spans from each 429 to the next call sent, when longer than `min_s`, merged; fed the
    calls in the order they were sent (holding only the 429s still waiting for a next call)."""

    def __init__(self, min_s: float) -> None:
        self.min_s = min_s
        self.refused: list[float] = []
        self.spans: list[tuple[float, float]] = []

    def add(self, call: CallSpan) -> None:
        while self.refused and self.refused[0] < call.sent_s:
            start = heapq.heappop(self.refused)
            if call.sent_s - start < self.min_s:
                continue
            if self.spans and start <= self.spans[-1][1]:
                self.spans[-1] = (self.spans[-1][0], max(call.sent_s, self.spans[-1][1]))
            else:
                self.spans.append((start, call.sent_s))
        if call.outcome == "429":
            heapq.heappush(self.refused, call.end_s)


class _Outages:
    """Spans given in the order they start, merged where less than `gap_s` apart."""

    def __init__(self, gap_s: float = OUTAGE_GAP_S) -> None:
        self.gap_s = gap_s
        self.spans: list[tuple[float, float]] = []

    def add(self, start: float, end: float) -> None:
        if self.spans and start <= self.spans[-1][1] + self.gap_s:
            self.spans[-1] = (self.spans[-1][0], max(end, self.spans[-1][1]))
        else:
            self.spans.append((start, end))


def outage_spans(spans: Sequence[CallSpan], gap_s: float = OUTAGE_GAP_S) -> list[tuple[float, float]]:
    """The spans the calls an open circuit held waited (from when each was held to when it was
    recorded), merged where less than `gap_s` apart: the endpoint's outages as the run saw them."""
    outages = _Outages(gap_s)
    for start, end in sorted((c.end_s - c.wait_s, c.end_s) for c in spans if c.outcome == "held"):
        outages.add(start, end)
    return outages.spans


def peak_levels(intervals: Iterable[tuple[float, float]], bins: int, bin_s: int) -> list[int]:
    """For each bin, the most intervals open at once within it."""
    peaks = _Peaks(bins, bin_s)
    for start, end in sorted(intervals):
        peaks.open(start, end)
    return peaks.close()


def pauses_after_429(calls: Sequence[CallSpan], min_s: float = PAUSE_MIN_S) -> list[tuple[float, float]]:
    """Spans from each 429 to the next call sent, when longer than `min_s`, merged."""
    pauses = _Pauses(min_s)
    for call in sorted(calls, key=lambda c: c.sent_s):
        pauses.add(call)
    return pauses.spans


def percentile_of(counts: Mapping[float, int], share: float) -> float | None:
    """`percentile` of values given as {value: how many}."""
    total = sum(counts.values())
    if not total:
        return None
    rank = min(total, max(1, math.ceil(share * total)))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    return None  # not reached: the counts add up to the total


def percentile(values: Sequence[float], share: float) -> float | None:
    """The value below which `share` of `values` lie (nearest rank); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]
