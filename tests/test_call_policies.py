"""The call path's pure decisions, as tables (openai-python's `_calculate_retry_timeout` tests are
the model): how long a failed call waits before it goes again, or whether it gives up
(`retry_policy.retry_wait_s`); which structured-output mode comes after a rejected one
(`structured.next_mode`); which error bodies say the endpoint refused the response format
(`failures.names_the_format`). No Redis, no HTTP: these run in the quick subset."""

from __future__ import annotations

import random

import pytest

from pipeline.core import errors
from pipeline.llm import retry_policy
from pipeline.llm.failures import names_the_format
from pipeline.llm.retry_policy import (
    NO_CAPACITY,
    RATE_LIMITED,
    UNAVAILABLE,
    RetryPolicy,
    kind_of,
    retry_wait_s,
)
from pipeline.llm.structured import next_mode


class Top(random.Random):
    """Jitter at the top of its window: the longest wait the policy allows."""

    def uniform(self, a: float, b: float) -> float:
        return b


class Bottom(random.Random):
    """Jitter at the bottom: what is left is the floor (the provider's Retry-After)."""

    def uniform(self, a: float, b: float) -> float:
        return a


ALONE = RetryPolicy()
"""No shared limiter: the client backs off itself."""
PACED = RetryPolicy(limiter_paces=True)
"""The shared limiter's pause is the wait after a 429."""
LONG = RetryPolicy(call_attempts=10)


@pytest.mark.parametrize(
    ("kind", "attempt", "retry_after_s", "policy", "rng", "expected"),
    [
        # 5xx, timeouts, dropped connections: 1, 2, 4 s windows (base 1 s), given up at the 4th try.
        (UNAVAILABLE, 1, None, ALONE, Top(), 1.0),
        (UNAVAILABLE, 2, None, ALONE, Top(), 2.0),
        (UNAVAILABLE, 3, None, ALONE, Top(), 4.0),
        (UNAVAILABLE, 4, None, ALONE, Top(), None),
        (UNAVAILABLE, 3, None, ALONE, Bottom(), 0.0),
        (UNAVAILABLE, 7, None, LONG, Top(), 20.0),  # the window is capped at 20 s
        (UNAVAILABLE, 9, None, LONG, Top(), 20.0),
        (UNAVAILABLE, 10, None, LONG, Top(), None),
        (UNAVAILABLE, 1, None, PACED, Top(), 1.0),  # the limiter paces 429s only
        # A 5xx's Retry-After is not a floor here: the backoff alone decides.
        (UNAVAILABLE, 1, 30.0, ALONE, Top(), 1.0),
        # Flex without capacity: its own backoff, with or without the limiter (no shared pause),
        # capped at a minute, given up at the 8th try; a Retry-After is a floor.
        (NO_CAPACITY, 1, None, PACED, Top(), 1.0),
        (NO_CAPACITY, 3, None, ALONE, Top(), 4.0),
        (NO_CAPACITY, 7, None, PACED, Top(), 60.0),
        (NO_CAPACITY, 8, None, PACED, Top(), None),
        (NO_CAPACITY, 1, 5.0, PACED, Bottom(), 5.0),
        # 429 with the shared limiter: its pause is the wait, the call asks it again at once.
        (RATE_LIMITED, 1, None, PACED, Top(), 0.0),
        (RATE_LIMITED, 1, 30.0, PACED, Top(), 0.0),
        (RATE_LIMITED, 5, None, PACED, Top(), 0.0),
        (RATE_LIMITED, 6, None, PACED, Top(), None),
        # 429 alone: the task layer's backoff (base 2 s, cap 120 s), Retry-After as the floor.
        (RATE_LIMITED, 1, None, ALONE, Top(), 4.0),
        (RATE_LIMITED, 2, None, ALONE, Top(), 8.0),
        (RATE_LIMITED, 1, 10.0, ALONE, Top(), 10.0),
        (RATE_LIMITED, 1, 10.0, ALONE, Bottom(), 10.0),
        (RATE_LIMITED, 1, 1.0, ALONE, Top(), 4.0),
        (RATE_LIMITED, 5, None, ALONE, Top(), 64.0),
        (RATE_LIMITED, 6, 1.0, ALONE, Top(), None),
        # Everything else goes up to the task at once.
        (retry_policy.OTHER, 1, None, ALONE, Top(), None),
        (retry_policy.OTHER, 1, 5.0, PACED, Top(), None),
    ],
)
def test_retry_wait(
    kind: str,
    attempt: int,
    retry_after_s: float | None,
    policy: RetryPolicy,
    rng: random.Random,
    expected: float | None,
) -> None:
    assert retry_wait_s(kind, attempt, retry_after_s, policy, rng) == expected


def test_the_jitter_spreads_waits_over_the_whole_window() -> None:
    rng = random.Random(7)
    waits = [retry_wait_s(UNAVAILABLE, 3, None, ALONE, rng) for _ in range(2_000)]
    assert all(w is not None and 0.0 <= w <= 4.0 for w in waits)
    spread = [w for w in waits if w is not None]
    assert min(spread) < 0.2 and max(spread) > 3.8, "full jitter: from 0 to the window's top"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (errors.RateLimited("429", 3.0), RATE_LIMITED),
        (errors.RateLimited("429", quota_spent=False), RATE_LIMITED),
        (errors.UpstreamUnavailable("503"), UNAVAILABLE),
        (errors.CapacityUnavailable("429 Resource Unavailable"), NO_CAPACITY),
        (errors.ProviderRejected("401 bad key"), retry_policy.OTHER),
        (errors.RetryableError("the database"), retry_policy.OTHER),
        (errors.PipelineError("anything"), retry_policy.OTHER),
    ],
)
def test_kind_of(error: errors.PipelineError, kind: str) -> None:
    assert kind_of(error) == kind


@pytest.mark.parametrize(
    ("configured", "rejected", "expected"),
    [
        ("auto", "json_schema", "json_object_schema"),
        ("auto", "json_object_schema", "json_object"),
        ("auto", "json_object", "prompt"),
        ("auto", "prompt", None),
        # A configured mode is kept: its rejection is an error naming the setting.
        ("json_schema", "json_schema", None),
        ("json_object", "json_object", None),
        ("prompt", "prompt", None),
    ],
)
def test_next_mode(configured: str, rejected: str, expected: str | None) -> None:
    assert next_mode(configured, rejected) == expected


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, '{"error": {"message": "Invalid parameter: response_format"}}', True),
        (422, "json_schema is not supported by this model", True),
        (500, "Internal error: json_schema grammar failed", True),  # llama-cpp-python
        (503, '{"detail": "unsupported response_format"}', True),
        (400, "max_tokens is too large", False),
        (400, "", False),
        (404, "response_format", False),
        (401, "json_schema", False),
        (429, "response_format", False),
        (500, "upstream connect error", False),
    ],
)
def test_names_the_format(status: int, body: str, expected: bool) -> None:
    assert names_the_format(status, body) is expected
