"""Whether a failed call is tried again inside the client, and after how long: a pure function.

The client is the one layer that retries a call (the SDK's own retries are off). It tries a
call again on two kinds of failure, each counted on its own:

- `rate_limited` (429): up to `rate_limited_attempts` tries. With the shared limiter the wait is
  the limiter's (the 429 set every worker's pause), so the call asks it again at once; without
  it, capped exponential backoff with full jitter, the provider's `Retry-After` as a floor.
- `unavailable` (5xx, timeout, dropped connection): up to `call_attempts` tries, with capped
  exponential backoff and full jitter.
- `no_capacity` (flex processing's 429 "Resource Unavailable"): up to `capacity_attempts` tries,
  with capped exponential backoff and full jitter (the flex guide's advice); no shared pause.

Every other failure is not retried here: it goes up to the task (`workers/task_retry.py`), which
retries transient ones with its own backoff, or records the permanent ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.core import errors
from pipeline.core.retry import backoff_s

CALL_ATTEMPTS = 4
"""Tries of one call on 5xx, dropped connections and timeouts before the task decides."""
RATE_LIMITED_ATTEMPTS = 6
"""Tries of one call refused with 429 (each after the shared pause)."""
CALL_BACKOFF_BASE_S = 1.0
CALL_BACKOFF_CAP_S = 20.0
CAPACITY_ATTEMPTS = 8
"""Tries of one flex call refused for want of capacity before the task decides."""
CAPACITY_BACKOFF_CAP_S = 60.0

RATE_LIMITED = "rate_limited"
UNAVAILABLE = "unavailable"
NO_CAPACITY = "no_capacity"
OTHER = "other"


@dataclass(frozen=True)
class RetryPolicy:
    call_attempts: int = CALL_ATTEMPTS
    rate_limited_attempts: int = RATE_LIMITED_ATTEMPTS
    backoff_base_s: float = CALL_BACKOFF_BASE_S
    backoff_cap_s: float = CALL_BACKOFF_CAP_S
    capacity_attempts: int = CAPACITY_ATTEMPTS
    capacity_backoff_cap_s: float = CAPACITY_BACKOFF_CAP_S
    limiter_paces: bool = False
    """True with the shared limiter: after a 429 its pause is the wait, none is added here."""


def kind_of(error: errors.PipelineError) -> str:
    """The retry kind of a mapped error: rate_limited, unavailable, no_capacity or other."""
    if isinstance(error, errors.CapacityUnavailable):
        return NO_CAPACITY
    if isinstance(error, errors.RateLimited):
        return RATE_LIMITED
    if isinstance(error, errors.UpstreamUnavailable):
        return UNAVAILABLE
    return OTHER


def retry_wait_s(
    kind: str,
    attempt: int,
    retry_after_s: float | None,
    policy: RetryPolicy,
    rng: random.Random,
) -> float | None:
    """Seconds to wait before trying the call again, or None to give up (raise the error).

    `attempt` counts the failed tries of this kind so far, this one included (1 after the
    first); `retry_after_s` is what the provider asked for, if anything. `rng` draws the
    jitter (`rng.uniform`), and only when there is a backoff to draw."""
    if kind == RATE_LIMITED:
        if attempt >= policy.rate_limited_attempts:
            return None
        if policy.limiter_paces:
            return 0.0
        return backoff_s(attempt, retry_after_s, rng=rng)
    if kind == UNAVAILABLE:
        if attempt >= policy.call_attempts:
            return None
        return backoff_s(attempt - 1, base_s=policy.backoff_base_s, cap_s=policy.backoff_cap_s, rng=rng)
    if kind == NO_CAPACITY:
        if attempt >= policy.capacity_attempts:
            return None
        cap_s = policy.capacity_backoff_cap_s
        return backoff_s(attempt - 1, retry_after_s, base_s=policy.backoff_base_s, cap_s=cap_s, rng=rng)
    return None


def flex_gives_way(standard_from: float | None, now: float, wait_s: float = 0.0) -> bool:
    """Whether a flex call goes at the standard tier now: `now` is past `standard_from` (epoch
    seconds; None: never), or waiting `wait_s` for flex capacity would take it past."""
    return standard_from is not None and now + wait_s >= standard_from
