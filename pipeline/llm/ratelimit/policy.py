"""The limiter's arithmetic as pure functions (the Lua scripts mirror the AIMD parts)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def effective_factor(cut_factor: float | None, cut_at_ms: int, now_ms: int, recovery_ms: float) -> float:
    """The share of the configured rate in force: back to 1 linearly after a cut."""
    if cut_factor is None:
        return 1.0
    return min(1.0, cut_factor + max(0, now_ms - cut_at_ms) / recovery_ms)


def cut(factor: float, decrease: float, floor: float) -> float:
    """Multiplicative decrease after the provider refused a call the limiter admitted."""
    return max(floor, factor * decrease)


def scaled_limit(limit: int, factor: float) -> int:
    """The limit in force under `factor` (0 stays 'no limit'; never below 1)."""
    return 0 if limit <= 0 else max(1, math.floor(limit * factor))


def limit_in_force(configured: int, told: int) -> int:
    """The provider's figure when nothing is configured or the configured one is higher."""
    if told > 0 and (configured <= 0 or told < configured):
        return told
    return configured


def too_large(tokens: int, tpm: int) -> bool:
    """A call that needs more tokens than a whole window allows can never be admitted."""
    return tpm > 0 and tokens > tpm


def wait_in_place(wait_s: float, waited_s: float, max_wait_s: float) -> bool:
    """Short waits are slept in the worker thread; a wait that would take the task past
    `max_wait_s` in total is handed back to the queue (as a countdown) instead."""
    return waited_s + wait_s <= max_wait_s


def parse_duration(text: str) -> float | None:
    """Seconds in an OpenAI-style duration: "250ms", "1s", "6m0s", "1h2m3.5s", or plain seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def provider_wait_s(headers: Mapping[str, str]) -> float | None:
    """How long a 429 asks every caller to wait, from the most precise header present.

    `retry-after-ms`, then `retry-after` (seconds), then the `x-ratelimit-reset-*` of the
    exhausted limits (or of both when neither says it is exhausted).
    """
    if value := headers.get("retry-after-ms"):
        seconds = parse_duration(value)
        if seconds is not None:
            return seconds / 1000
    if value := headers.get("retry-after"):
        seconds = parse_duration(value)
        if seconds is not None:
            return seconds
    told = provider_limits(headers)
    resets: list[float] = []
    exhausted: list[float] = []
    for reset, remaining in (
        (told.reset_requests_s, told.remaining_requests),
        (told.reset_tokens_s, told.remaining_tokens),
    ):
        if reset is None:
            continue
        resets.append(reset)
        if remaining == 0:
            exhausted.append(reset)
    chosen = exhausted or resets
    return max(chosen) if chosen else None


@dataclass(frozen=True)
class ProviderLimits:
    """What one answer's `x-ratelimit-*` headers said (None: the header was absent)."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None

    @property
    def spent(self) -> bool:
        """No requests or no tokens remain in the provider's window (or it did not say)."""
        said = [r for r in (self.remaining_requests, self.remaining_tokens) if r is not None]
        return not said or 0 in said


def provider_limits(headers: Mapping[str, str]) -> ProviderLimits:
    """The `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` headers of an answer; a value
    that does not parse counts as absent (a provider's odd header never stops a call)."""

    def count(name: str) -> int | None:
        try:
            value = int(float(headers.get(name, "").strip()))
        except ValueError:
            return None
        return value if value >= 0 else None

    def duration(name: str) -> float | None:
        return parse_duration(headers[name]) if name in headers else None

    return ProviderLimits(
        limit_requests=count("x-ratelimit-limit-requests"),
        remaining_requests=count("x-ratelimit-remaining-requests"),
        reset_requests_s=duration("x-ratelimit-reset-requests"),
        limit_tokens=count("x-ratelimit-limit-tokens"),
        remaining_tokens=count("x-ratelimit-remaining-tokens"),
        reset_tokens_s=duration("x-ratelimit-reset-tokens"),
    )
