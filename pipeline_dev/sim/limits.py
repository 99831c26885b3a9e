"""Pure provider limits: a sliding 60 s window over admitted requests and their tokens."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

WINDOW_S = 60.0


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


class SlidingWindowLimiter:
    """Admits a request when the last window (60 s) of admissions plus it stay within rpm and tpm.

    Decisions are made at arrival, so no 60 s window ever holds more than `rpm`
    admissions or more than `tpm` tokens. A limit of 0 means none. The limiter also
    keeps the busiest window seen, which is what the provider's dashboard would show.
    """

    def __init__(self, rpm: int, tpm: int, window_s: float = WINDOW_S) -> None:
        self.rpm = rpm
        self.tpm = tpm
        self.window_s = window_s
        self._window: deque[tuple[float, int]] = deque()
        self._window_tokens = 0
        self.max_requests_in_window = 0
        self.max_tokens_in_window = 0

    def reset(self) -> None:
        """Forget all admissions."""
        self._window.clear()
        self._window_tokens = 0
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
        admitted = not too_large and wait <= 0.0
        if admitted:
            self._window.append((now, tokens))
            self._window_tokens += tokens
            self.max_requests_in_window = max(self.max_requests_in_window, len(self._window))
            self.max_tokens_in_window = max(self.max_tokens_in_window, self._window_tokens)
        return Decision(
            admitted=admitted,
            retry_after_s=0.0 if admitted else (self.window_s if too_large else wait),
            limit_requests=self.rpm,
            remaining_requests=max(0, self.rpm - len(self._window)) if self.rpm else 0,
            reset_requests_s=self._requests_free_in(now, 1),
            limit_tokens=self.tpm,
            remaining_tokens=max(0, self.tpm - self._window_tokens) if self.tpm else 0,
            reset_tokens_s=self._tokens_free_in(now, max(1, tokens)),
            too_large=too_large,
        )


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
