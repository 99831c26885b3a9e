"""Provider limits: a sliding 60 s window over admitted requests and their tokens, and the
per-second quantization that real providers add on top of it.

OpenAI's rate-limit guide: "Rate limits may be quantized, meaning they are enforced over shorter
periods of time (e.g. 60,000 requests/minute may be enforced as 1,000 requests/second)", and
"unsuccessful requests contribute to your per-minute limit". The per-second part is counted by
the `limits` library's fixed windows, not by code of ours, so a limiter that merely agrees with
this module's arithmetic does not pass for free.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter

WINDOW_S = 60.0
QUANTUM_S = 1


@dataclass(frozen=True)
class Decision:
    """The limiter's verdict on one request, with what the rate-limit headers report."""

    admitted: bool
    retry_after_s: float  # 0 when admitted
    limit_requests: int
    remaining_requests: int
    reset_requests_s: float  # until the next request slot frees up (0 when one is free)
    limit_tokens: int
    remaining_tokens: int
    reset_tokens_s: float  # until the tokens asked for fit again (0 when they do)
    too_large: bool = False  # the request alone needs more than tpm: it can never be admitted
    per_second: bool = False  # refused by the per-second quantum, not by the window


class PerSecondQuota:
    """limit/window per second, for requests and for tokens (fixed one-second windows): a request
    is refused once its second's share is spent.

    Every request counts against its second, refused ones included. The request that spends a
    second's share of tokens may overshoot it (a chunk bigger than a second's share could never
    pass otherwise); the minute window bounds the rate over time.
    """

    def __init__(self, rpm: int, tpm: int, window_s: float) -> None:
        self._limiter = FixedWindowRateLimiter(MemoryStorage())
        self.requests = RateLimitItemPerSecond(math.ceil(rpm * QUANTUM_S / window_s)) if rpm else None
        self.tokens = RateLimitItemPerSecond(math.ceil(tpm * QUANTUM_S / window_s)) if tpm else None

    def wait_s(self, tokens: int) -> float:
        """0 when this second has room for one more request of `tokens`, else until it ends."""
        waits = [0.0]
        if self.requests is not None and not self._limiter.test(self.requests, "requests"):
            waits.append(self._limiter.get_window_stats(self.requests, "requests").reset_time)
        if self.tokens is not None and not self._limiter.test(self.tokens, "tokens"):
            waits.append(self._limiter.get_window_stats(self.tokens, "tokens").reset_time)
        return max(0.0, max(waits) - time.time()) if len(waits) > 1 else 0.0

    def count(self, tokens: int, admitted: bool) -> None:
        if self.requests is not None:
            self._limiter.hit(self.requests, "requests")
        if admitted and self.tokens is not None:
            self._limiter.hit(self.tokens, "tokens", cost=max(1, tokens))

    def reset(self) -> None:
        self._limiter.storage.reset()


class SlidingWindowLimiter:
    """Admits a request when the last window (60 s) of admissions plus it stay within rpm and tpm.

    Decisions are made at arrival, so no 60 s window ever holds more than `rpm`
    admissions or more than `tpm` tokens. A limit of 0 means none. The limiter also
    keeps the busiest window seen, which is what the provider's dashboard would show.
    """

    def __init__(self, rpm: int, tpm: int, window_s: float = WINDOW_S, *, quantize: bool = True) -> None:
        self.rpm = rpm
        self.tpm = tpm
        self.window_s = window_s
        self.quantum = PerSecondQuota(rpm, tpm, window_s) if quantize and (rpm or tpm) else None
        self._window: deque[tuple[float, int]] = deque()
        self._window_tokens = 0
        self.max_requests_in_window = 0
        self.max_tokens_in_window = 0

    def reset(self) -> None:
        """Forget all admissions."""
        self._window.clear()
        self._window_tokens = 0
        if self.quantum is not None:
            self.quantum.reset()
        self.max_requests_in_window = 0
        self.max_tokens_in_window = 0

    def _expire(self, now: float) -> None:
        while self._window and self._window[0][0] <= now - self.window_s:
            self._window_tokens -= self._window.popleft()[1]

    def _requests_free_in(self, now: float, needed: int) -> float:
        """Seconds until `needed` more request slots are free."""
        if not self.rpm or len(self._window) + needed <= self.rpm:
            return 0.0
        index = len(self._window) + needed - self.rpm - 1
        return max(0.0, self._window[index][0] + self.window_s - now)

    def _tokens_free_in(self, now: float, tokens: int) -> float:
        """Seconds until `tokens` more fit in the window."""
        if not self.tpm or self._window_tokens + tokens <= self.tpm:
            return 0.0
        excess = self._window_tokens + tokens - self.tpm
        for stamp, spent in self._window:
            excess -= spent
            if excess <= 0:
                return max(0.0, stamp + self.window_s - now)
        return self.window_s

    def check(self, now: float, tokens: int) -> Decision:
        """Admit (and record) a request of `tokens` arriving at `now`, or say how long to wait."""
        self._expire(now)
        too_large = bool(self.tpm) and tokens > self.tpm
        wait = max(self._requests_free_in(now, 1), self._tokens_free_in(now, tokens))
        second_wait = 0.0
        if self.quantum is not None and not too_large and wait <= 0.0:
            second_wait = self.quantum.wait_s(tokens)
        admitted = not too_large and wait <= 0.0 and second_wait <= 0.0
        if self.quantum is not None:
            self.quantum.count(tokens, admitted)
        if admitted:
            self._window.append((now, tokens))
            self._window_tokens += tokens
            self.max_requests_in_window = max(self.max_requests_in_window, len(self._window))
            self.max_tokens_in_window = max(self.max_tokens_in_window, self._window_tokens)
        remaining_requests = max(0, self.rpm - len(self._window)) if self.rpm else 0
        remaining_tokens = max(0, self.tpm - self._window_tokens) if self.tpm else 0
        return Decision(
            admitted=admitted,
            retry_after_s=0.0 if admitted else (self.window_s if too_large else max(wait, second_wait)),
            limit_requests=self.rpm,
            remaining_requests=remaining_requests,
            reset_requests_s=self._replenished_in(self.rpm, remaining_requests),
            limit_tokens=self.tpm,
            remaining_tokens=remaining_tokens,
            reset_tokens_s=self._replenished_in(self.tpm, remaining_tokens),
            too_large=too_large,
            per_second=second_wait > 0.0,
        )

    def _replenished_in(self, limit: int, remaining: int) -> float:
        """OpenAI's `x-ratelimit-reset-*`: "the time until the rate limit resets to its initial
        state", the quota replenishing at limit per window (its example: 59 of 60 requests
        remaining, reset in 1s)."""
        return (limit - remaining) * self.window_s / limit if limit else 0.0


def openai_duration(seconds: float) -> str:
    """A duration the way OpenAI's `x-ratelimit-reset-*` headers write it: "250ms", "1s", "6m0s"."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    millis = math.ceil(seconds * 1000)
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
