"""Retry timing as pure functions: capped exponential backoff with full jitter."""

from __future__ import annotations

import random

from pipeline.core.constants import RETRY_BASE_DELAY_S, RETRY_MAX_DELAY_S, VISIBILITY_TIMEOUT_S


def backoff_s(
    attempt: int,
    retry_after_s: float | None = None,
    *,
    base_s: float = RETRY_BASE_DELAY_S,
    cap_s: float = RETRY_MAX_DELAY_S,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number `attempt` (0-based).

    Full jitter spreads retries of many workers over the window instead of synchronising
    them; the provider's own `Retry-After`, when given, is a floor.
    """
    window = min(cap_s, base_s * 2**attempt)
    delay = (rng or random).uniform(0, window)
    return max(delay, retry_after_s or 0.0)


MAX_COUNTDOWN_S = VISIBILITY_TIMEOUT_S / 2
"""The longest a task waits in the queue for its retry. A worker holds a message with an ETA
unacknowledged, and Redis hands it out again after the visibility timeout: a countdown past it
(a provider's reset measured in hours) would run the task twice. The retry asks the limiter
again when it comes, and waits again if it must."""


def countdown_s(seconds: float | None) -> float:
    """A retry's countdown, capped below the visibility timeout."""
    return min(max(seconds or 0.0, 0.0), MAX_COUNTDOWN_S)
