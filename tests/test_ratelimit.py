"""The global limiter: its arithmetic, then its Lua scripts against a real Redis."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest
import redis

from pipeline.core.errors import Deferred, RequestTooLarge
from pipeline.llm.ratelimit import Decision, Limits, RedisLimiter, Scope, keys, policy

# -- the arithmetic ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("2.5", 2.5),
        ("soon", None),
        ("", None),
    ],
)
def test_durations_read_as_openai_writes_them(text: str, seconds: float | None) -> None:
    assert policy.parse_duration(text) == seconds


def test_the_most_precise_wait_header_wins() -> None:
    assert policy.provider_wait_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert policy.provider_wait_s({"retry-after": "3"}) == 3.0
    exhausted_tokens = {
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-remaining-requests": "5",
        "x-ratelimit-reset-tokens": "6m0s",
        "x-ratelimit-remaining-tokens": "0",
    }
    assert policy.provider_wait_s(exhausted_tokens) == 360.0
    assert (
        policy.provider_wait_s({"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "1s"}) == 2.0
    )
    assert policy.provider_wait_s({}) is None


def test_the_adaptive_factor_drops_multiplicatively_and_recovers_linearly() -> None:
    assert policy.cut(1.0, 0.7, 0.2) == pytest.approx(0.7)
    assert policy.cut(0.25, 0.7, 0.2) == 0.2
    assert policy.effective_factor(None, 0, 5_000, 10_000) == 1.0
    assert policy.effective_factor(0.5, 1_000, 3_500, 10_000) == pytest.approx(0.75)
    assert policy.effective_factor(0.5, 1_000, 60_000, 10_000) == 1.0


def test_scaled_limits_keep_zero_as_no_limit_and_never_drop_below_one() -> None:
    assert policy.scaled_limit(0, 0.5) == 0
    assert policy.scaled_limit(300, 0.7) == 210
    assert policy.scaled_limit(1, 0.2) == 1


def test_waits_in_place_only_while_the_total_stays_short() -> None:
    assert policy.wait_in_place(2.0, 25.0, 30.0)
    assert not policy.wait_in_place(6.0, 25.0, 30.0)
    assert policy.too_large(150_001, 150_000) and not policy.too_large(10, 0)


# -- the scripts, against Redis ------------------------------------------------------------


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    conn: redis.Redis = redis.Redis.from_url(redis_url)
    yield conn
    conn.close()


@pytest.fixture
def scope(client: redis.Redis) -> Iterator[Scope]:
    made = Scope("http://127.0.0.1:1/v1", f"model-{uuid.uuid4().hex[:6]}", 0)
    yield made
    client.delete(*keys(made))


def _limiter(client: redis.Redis, **limits: float) -> RedisLimiter:
    return RedisLimiter(client, Limits(**limits), lease_s=5, recovery_s=2, max_wait_s=0)  # type: ignore[arg-type]


def _try(limiter: RedisLimiter, scope: Scope, tokens: int = 1) -> Decision:
    return limiter.try_acquire(scope, tokens, uuid.uuid4().hex)


def test_requests_are_admitted_up_to_the_limit_then_told_when_a_slot_frees(
    client: redis.Redis, scope: Scope
) -> None:
    limiter = _limiter(client, rpm=3, window_s=1.0)
    first = _try(limiter, scope)
    assert [_try(limiter, scope).admitted for _ in range(2)] == [True, True]
    refused = _try(limiter, scope)
    assert not refused.admitted and refused.reason == "rpm"
    assert 0 < refused.wait_s <= 1.0
    assert refused.at_ms - first.at_ms + refused.wait_s * 1000 == pytest.approx(1000, abs=5)
    time.sleep(refused.wait_s + 0.01)
    assert _try(limiter, scope).admitted


def test_tokens_are_reserved_and_refunded_to_what_the_call_used(client: redis.Redis, scope: Scope) -> None:
    limiter = _limiter(client, tpm=1_000, window_s=10.0)
    permit = limiter.acquire([scope], 800)
    refused = _try(limiter, scope, 300)
    assert not refused.admitted and refused.reason == "tpm"
    limiter.release(permit, 200)
    assert _try(limiter, scope, 300).tokens_in_window == 500
    assert limiter.view(scope).tokens_in_window == 500


def test_a_call_refused_for_tokens_takes_no_request_slot(client: redis.Redis, scope: Scope) -> None:
    limiter = _limiter(client, rpm=2, tpm=100, window_s=10.0)
    assert _try(limiter, scope, 90).admitted
    assert not _try(limiter, scope, 50).admitted
    decision = _try(limiter, scope, 10)
    assert decision.admitted and decision.requests_in_window == 2


def test_in_flight_leases_are_freed_by_release_or_by_expiry(client: redis.Redis, scope: Scope) -> None:
    limiter = RedisLimiter(client, Limits(max_inflight=2), lease_s=0.3, max_wait_s=0)
    held = [limiter.acquire([scope], 1) for _ in range(2)]
    assert _try(limiter, scope).reason == "inflight"
    limiter.release(held[0], 1)
    assert _try(limiter, scope).admitted  # the freed slot, taken again
    assert _try(limiter, scope).reason == "inflight"
    time.sleep(0.35)  # the workers holding them "died": their leases expire
    assert _try(limiter, scope).admitted


def test_a_pause_after_a_429_holds_every_worker(client: redis.Redis, scope: Scope) -> None:
    refused_worker, other_worker = _limiter(client), _limiter(client)
    refused_worker.pause(scope, 0.5)
    decision = _try(other_worker, scope)
    assert not decision.admitted and decision.reason == "paused"
    assert 0.3 < decision.wait_s <= 0.5
    time.sleep(decision.wait_s + 0.01)
    assert _try(other_worker, scope).admitted


def test_refusals_the_limiter_admitted_lower_the_rate_once_per_event(
    client: redis.Redis, scope: Scope
) -> None:
    limiter = _limiter(client, rpm=100, window_s=10.0)
    _, factor = limiter.pause(scope, 0.001)
    assert factor == pytest.approx(0.7, abs=0.01)
    _, again = limiter.pause(scope, 0.001)  # the same burst of 429s: no second cut
    assert again == pytest.approx(factor, abs=0.01)
    time.sleep(0.01)
    assert _try(limiter, scope).factor < 1
    assert limiter.view(scope).effective_rpm in (70, 71)
    time.sleep(0.7)  # recovery_s=2: +0.35 in 0.7 s
    assert limiter.view(scope).factor == 1.0


def test_a_call_larger_than_the_quota_fails_at_once(client: redis.Redis, scope: Scope) -> None:
    with pytest.raises(RequestTooLarge, match="more than the 1,000-token quota"):
        _limiter(client, tpm=1_000).acquire([scope], 1_001)


def test_short_waits_are_slept_and_long_ones_handed_back(client: redis.Redis, scope: Scope) -> None:
    slept: list[float] = []
    limiter = RedisLimiter(client, Limits(rpm=1, window_s=0.2), lease_s=5, max_wait_s=1.0, sleep=slept.append)
    limiter.acquire([scope], 1)
    with pytest.raises(Deferred):  # the injected sleep does not pass time: it keeps waiting
        limiter.acquire([scope], 1)
    assert slept and all(0 < s <= 0.25 for s in slept) and sum(slept) <= 1.0
    patient = RedisLimiter(client, Limits(rpm=1, window_s=0.2), lease_s=5, max_wait_s=1.0)
    assert patient.acquire([scope], 1).waited_s > 0


def test_calls_are_spread_over_the_key_slots(client: redis.Redis) -> None:
    scopes = [Scope("http://127.0.0.1:1/v1", f"m-{uuid.uuid4().hex[:6]}", slot) for slot in range(3)]
    limiter = _limiter(client, rpm=2, window_s=10.0)
    try:
        slots = [limiter.acquire(scopes, 1).scope.key_slot for _ in range(6)]
        assert sorted(slots) == [0, 0, 1, 1, 2, 2]
        with pytest.raises(Deferred):
            limiter.acquire(scopes, 1)
    finally:
        client.delete(*[k for s in scopes for k in keys(s)])


def test_every_key_is_prefixed_and_expires(client: redis.Redis, scope: Scope) -> None:
    limiter = RedisLimiter(client, Limits(rpm=5, tpm=100, max_inflight=3, window_s=1.0), lease_s=1)
    limiter.acquire([scope], 10)
    limiter.pause(scope, 0.1)
    present = [k for k in keys(scope) if client.exists(k)]
    assert len(present) == 6
    assert all(k.startswith("pipeline:rl:{") for k in present)
    assert all(client.pttl(k) > 0 for k in present)


def _hammer(redis_url: str, scope: Scope, limit: int, window_s: float, seconds: float) -> list[int]:
    """One OS process of callers: returns the Redis times of its admissions."""
    from concurrent.futures import ThreadPoolExecutor

    client: redis.Redis = redis.Redis.from_url(redis_url)
    limiter = RedisLimiter(client, Limits(rpm=limit, window_s=window_s), lease_s=5, max_wait_s=0)
    deadline = time.monotonic() + seconds

    def caller() -> list[int]:
        admitted = []
        while time.monotonic() < deadline:
            decision = limiter.try_acquire(scope, 1, uuid.uuid4().hex)
            if decision.admitted:
                admitted.append(decision.at_ms)
            else:
                time.sleep(min(decision.wait_s, 0.01))
        return admitted

    with ThreadPoolExecutor(4) as pool:
        return [t for result in pool.map(lambda _: caller(), range(4)) for t in result]


def test_no_window_ever_holds_more_admissions_than_the_limit_across_processes(
    redis_url: str, scope: Scope
) -> None:
    limit, window_ms = 25, 500
    with ProcessPoolExecutor(4, mp_context=get_context("spawn")) as pool:
        runs = [pool.submit(_hammer, redis_url, scope, limit, window_ms / 1000, 2.5) for _ in range(4)]
        stamps = sorted(t for run in runs for t in run.result())
    assert len(stamps) >= 4 * limit, "the callers kept the limiter busy"
    for i, start in enumerate(stamps):
        in_window = sum(1 for t in stamps[i : i + limit + 1] if t < start + window_ms)
        assert in_window <= limit, f"{in_window} admissions in the window from {start}"
