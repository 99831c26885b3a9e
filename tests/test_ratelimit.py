"""The global limiter: its arithmetic, then its Lua scripts against a real Redis, their time
moved through the limiter's seam (`limiter_clock.moved`) instead of slept through."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from multiprocessing import get_context
from typing import Any

import pytest
import redis

from pipeline.core.errors import Deferred, RequestTooLarge
from pipeline.core.settings import default
from pipeline.llm.ratelimit import Decision, Limits, RedisLimiter, Scope, keys, policy
from pipeline.llm.ratelimit import clock as limiter_clock
from pipeline.runtime import embedded

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
def scope(client: redis.Redis) -> Iterator[Scope]:
    made = Scope("http://127.0.0.1:1/v1", f"model-{uuid.uuid4().hex[:6]}", 0)
    yield made
    client.delete(*keys(made).all())


def _limiter(client: redis.Redis, **limits: float) -> RedisLimiter:
    return RedisLimiter(client, Limits(**limits), lease_s=5, min_factor=0.2, recovery_s=2, max_wait_s=0)  # type: ignore[arg-type]


def _try(limiter: RedisLimiter, scope: Scope, tokens: int = 1) -> Decision:
    return limiter.try_acquire(scope, tokens, uuid.uuid4().hex)


def _send_ms(decision: Decision) -> int:
    assert decision.admitted, decision
    return decision.at_ms + round(decision.wait_s * 1000)


def test_calls_are_spread_at_the_quotas_rate_not_admitted_at_once(client: redis.Redis, scope: Scope) -> None:
    limiter = _limiter(client, rpm=60, window_s=1.0)  # one call per 16.7 ms
    sends = [_send_ms(limiter.try_acquire(scope, 1, uuid.uuid4().hex, max_wait_s=1.0)) for _ in range(10)]
    gaps = [b - a for a, b in itertools.pairwise(sends)]
    assert all(15 <= g <= 19 for g in gaps), gaps
    # A send time beyond the longest wait is refused, not reserved: the refusal names the next
    # free slot, one interval after the last send (on Redis's clock: however long these took).
    refused = _try(limiter, scope)
    assert not refused.admitted and refused.reason == "rpm"
    assert abs(refused.at_ms + refused.wait_s * 1000 - (sends[-1] + 1000 / 60)) <= 3, (refused, sends)
    assert _try(limiter, scope).requests_in_window == 10


def test_headers_that_arrive_late_are_held_against_the_window_they_describe(
    client: redis.Redis, scope: Scope
) -> None:
    limiter = _limiter(client, rpm=10, window_s=1.0, burst_s=1.0)
    permits = [limiter.acquire([scope], 1) for _ in range(5)]
    told = policy.ProviderLimits(limit_requests=10, remaining_requests=5, reset_requests_s=0.5)
    # A slow answer: our window has moved on, the provider's count is from then.
    with limiter_clock.moved(0.7):
        assert limiter.release(permits[0], told) == (0.0, 0.0), "5 of 10 left then: exactly what we used"
        with limiter_clock.moved(0.4):  # now past the window those 5 calls were in
            assert limiter.release(permits[1], told) == (0.0, 0.0)


def test_calls_that_left_our_window_still_count_against_a_slow_answers_headers(
    client: redis.Redis, scope: Scope
) -> None:
    limiter = _limiter(client, rpm=10, window_s=1.0, burst_s=1.0)
    for _ in range(5):
        limiter.acquire([scope], 1)
    with limiter_clock.moved(0.5):
        slow = limiter.acquire([scope], 1)  # the provider saw 6 of 10 when it arrived
        with limiter_clock.moved(0.7):
            limiter.acquire([scope], 1)  # the rate has fallen; its turn moves the first 5 out of our window
            assert client.zcard(keys(scope).retired) == 5
            told = policy.ProviderLimits(limit_requests=10, remaining_requests=4, reset_requests_s=1.0)
            assert limiter.release(slow, told) == (0.0, 0.0), "4 left then, as we count too: nothing to push"


def test_a_burst_allowance_lets_that_many_seconds_of_quota_go_at_once(
    client: redis.Redis, scope: Scope
) -> None:
    # One call per 10 s, a 25 s burst: 2 calls beyond the first, and 5 s to spare for a loaded
    # machine between the tries (at 17 ms a call and a 40 ms burst, a clean clone's CI once
    # admitted the fifth).
    limiter = _limiter(client, rpm=60, window_s=600.0, burst_s=25.0)
    decisions = [_try(limiter, scope) for _ in range(5)]
    assert [d.admitted for d in decisions] == [True, True, True, False, False]


def test_tokens_are_paced_by_their_cost(client: redis.Redis, scope: Scope) -> None:
    limiter = _limiter(client, tpm=1_000, window_s=1.0)
    first = limiter.try_acquire(scope, 500, uuid.uuid4().hex, max_wait_s=2.0)
    second = limiter.try_acquire(scope, 100, uuid.uuid4().hex, max_wait_s=2.0)
    third = limiter.try_acquire(scope, 100, uuid.uuid4().hex, max_wait_s=2.0)
    assert 495 <= _send_ms(second) - _send_ms(first) <= 505  # the 500 tokens take half a window
    assert 95 <= _send_ms(third) - _send_ms(second) <= 105
    assert third.reason == "tpm" and third.tokens_in_window == 700


def test_a_reservation_above_what_the_provider_charged_is_refunded(client: redis.Redis, scope: Scope) -> None:
    limiter = _limiter(client, tpm=1_000, window_s=1.0)
    permit = limiter.acquire([scope], 500)  # the next 500 ms of token quota are reserved
    limiter.release(permit, policy.ProviderLimits(), charged_tokens=200)
    after = limiter.try_acquire(scope, 100, uuid.uuid4().hex, max_wait_s=1.0)
    assert after.tokens_in_window == 300
    assert after.wait_s <= 0.21, "the 300 tokens not charged are free again"


def test_a_call_with_a_horizon_reserves_its_turn_only_once_it_is_near(
    client: redis.Redis, scope: Scope
) -> None:
    """An uncalibrated call's cost is a guess: it must not hold a place far down the queue."""
    log = keys(scope).log
    naps: list[tuple[float, int]] = []
    later = ExitStack()

    def sleep(seconds: float) -> None:  # the wait passes on the limiter's clock
        naps.append((seconds, client.zcard(log)))
        later.enter_context(limiter_clock.moved(seconds))

    limiter = RedisLimiter(
        client, Limits(tpm=60_000), lease_s=5, recovery_s=300, min_factor=0.2, max_wait_s=5, sleep=sleep
    )  # 1,000 tokens/s
    limiter.acquire([scope], 1_500)  # the next 1.5 s of token quota are taken
    with later:
        permit = limiter.acquire([scope], 100, horizon_s=0.3)
    assert naps[0][1] == 1 and naps[0][0] >= 1.0, "1.5 s away: not reserved yet"
    assert client.zcard(log) == 2
    assert 1.4 <= permit.waited_s <= 2.0, "it still goes at its turn"


def test_without_pacing_the_window_alone_admits_a_whole_windows_quota(
    client: redis.Redis, scope: Scope
) -> None:
    limiter = _limiter(client, rpm=3, window_s=1.0, pacing=False)
    first = _try(limiter, scope)
    assert [_try(limiter, scope).admitted for _ in range(2)] == [True, True]
    refused = _try(limiter, scope)
    assert not refused.admitted and refused.reason == "rpm window"
    assert refused.requests_in_window == 3
    # The oldest admission leaves the window one window after it was made.
    assert 0.9 < refused.wait_s + (refused.at_ms - first.at_ms) / 1000 <= 1.01
    with limiter_clock.moved(refused.wait_s + 0.01):
        assert _try(limiter, scope).admitted


def test_the_window_still_bounds_what_the_burst_allows(client: redis.Redis, scope: Scope) -> None:
    limiter = _limiter(client, rpm=2, tpm=100, window_s=10.0, burst_s=60.0)
    assert _try(limiter, scope, 90).admitted
    assert not _try(limiter, scope, 50).admitted
    decision = _try(limiter, scope, 10)
    assert decision.admitted and decision.tokens_in_window == 100
    assert _try(limiter, scope, 1).reason == "rpm window"


def test_calls_in_flight_are_capped_and_leases_expire(client: redis.Redis, scope: Scope) -> None:
    limiter = RedisLimiter(
        client, Limits(max_inflight=2, learn=False), lease_s=0.3, recovery_s=300, min_factor=0.2, max_wait_s=0
    )
    held = [limiter.acquire([scope], 1) for _ in range(2)]
    assert _try(limiter, scope).reason == "inflight"
    limiter.release(held[0], None)
    assert _try(limiter, scope).admitted  # the freed slot, taken again
    assert _try(limiter, scope).reason == "inflight"
    with limiter_clock.moved(0.35):  # the leases of calls that never came back expire by themselves
        assert _try(limiter, scope).admitted


def test_with_nothing_configured_the_limits_are_learned_from_the_first_answer(
    client: redis.Redis, scope: Scope
) -> None:
    limiter = _limiter(client, window_s=1.0)
    probe = limiter.acquire([scope], 10)
    assert _try(limiter, scope).reason == "probing", "one call at a time until the provider has spoken"
    limiter.release(
        probe, policy.ProviderLimits(limit_requests=60, remaining_requests=59, limit_tokens=10_000)
    )
    learned = _try(limiter, scope)
    assert learned.admitted and (learned.rpm, learned.tpm) == (60, 10_000)
    assert not _try(limiter, scope).admitted, "paced at the learned 60 per window"
    view = limiter.view(scope)
    assert (view.learned_rpm, view.rpm_in_force, view.effective_rpm) == (60, 60, 60)


def test_a_probe_that_never_answers_holds_the_others_back_only_briefly(
    client: redis.Redis, scope: Scope
) -> None:
    # Its worker was killed mid-call: the probe's in-flight lease (5 s here) must not hold everyone.
    limiter = RedisLimiter(
        client, Limits(window_s=1.0), lease_s=5, recovery_s=300, min_factor=0.2, max_wait_s=0, probe_s=0.3
    )
    limiter.acquire([scope], 10)
    refused = _try(limiter, scope)
    assert (refused.admitted, refused.reason) == (False, "probing")
    assert refused.wait_s <= 0.1, "waiters poll: the probe's answer may come any moment"
    with limiter_clock.moved(0.35):
        assert _try(limiter, scope).admitted, "a second probe goes once the first one's claim lapsed"
        assert _try(limiter, scope).reason == "probing"


def test_a_provider_without_limit_headers_ends_the_probe(client: redis.Redis, scope: Scope) -> None:
    limiter = _limiter(client, window_s=1.0)
    limiter.release(limiter.acquire([scope], 10), policy.ProviderLimits())
    assert all(_try(limiter, scope).admitted for _ in range(5))


def test_a_configured_limit_above_the_providers_is_lowered_to_it(client: redis.Redis, scope: Scope) -> None:
    limiter = _limiter(client, rpm=600, window_s=1.0)
    limiter.release(
        limiter.acquire([scope], 1), policy.ProviderLimits(limit_requests=120, remaining_requests=119)
    )
    decision = _try(limiter, scope)
    assert decision.rpm == 120
    view = limiter.view(scope)
    assert (view.rpm_in_force, view.learned_rpm) == (120, 120)


def test_when_the_provider_has_less_room_than_we_believe_the_provider_wins(
    client: redis.Redis, scope: Scope
) -> None:
    limiter = _limiter(client, rpm=600, window_s=1.0)  # we believe 599 calls remain after one
    permit = limiter.acquire([scope], 1)
    told = policy.ProviderLimits(limit_requests=600, remaining_requests=0, reset_requests_s=0.4)
    pushed_requests, _ = limiter.release(permit, told)
    assert pushed_requests == pytest.approx(0.4, abs=0.01), "at most until the provider's reset"
    refused = _try(limiter, scope)
    assert not refused.admitted and 0.3 < refused.wait_s <= 0.41


def test_a_pause_after_a_429_holds_every_worker(client: redis.Redis, scope: Scope) -> None:
    refused_worker, other_worker = _limiter(client), _limiter(client)
    refused_worker.pause(scope, 0.5)
    decision = _try(other_worker, scope)
    assert not decision.admitted and decision.reason == "paused"
    assert 0.3 < decision.wait_s <= 0.5
    with limiter_clock.moved(decision.wait_s + 0.01):
        assert _try(other_worker, scope).admitted


def test_refusals_the_limiter_admitted_lower_the_rate_once_per_event(
    client: redis.Redis, scope: Scope
) -> None:
    limiter = _limiter(client, rpm=100, window_s=10.0)
    _, factor = limiter.pause(scope, 0.001)
    assert factor == pytest.approx(0.8, abs=0.01)
    _, again = limiter.pause(scope, 0.001)  # the same burst of 429s: no second cut
    assert again == pytest.approx(factor, abs=0.01)
    with limiter_clock.moved(0.01):
        assert _try(limiter, scope).factor < 1
        # Climbing back already (recovery_s=2: +0.1 every 0.2 s, and a loaded machine is slow).
        assert 80 <= limiter.view(scope).effective_rpm < 100
        with limiter_clock.moved(0.45):  # +0.225 in 0.45 s
            assert limiter.view(scope).factor == 1.0


def test_after_a_cut_the_rate_never_stays_below_what_the_provider_says_is_free(
    client: redis.Redis, scope: Scope
) -> None:
    limiter = RedisLimiter(
        client, Limits(rpm=100, window_s=10.0), lease_s=5, min_factor=0.2, recovery_s=600, max_wait_s=0
    )
    _, factor = limiter.pause(scope, 0.001)
    assert factor == pytest.approx(0.8, abs=0.01)
    with limiter_clock.moved(0.01):
        permit = limiter.acquire([scope], 1)
        limiter.release(permit, policy.ProviderLimits(limit_requests=100, remaining_requests=95))
        assert limiter.view(scope).factor == pytest.approx(0.95, abs=0.01)


def test_a_call_larger_than_the_quota_fails_at_once(client: redis.Redis, scope: Scope) -> None:
    with pytest.raises(RequestTooLarge, match="more than the 1,000-token quota"):
        _limiter(client, tpm=1_000).acquire([scope], 1_001)


def test_short_waits_are_slept_and_long_ones_handed_back(client: redis.Redis, scope: Scope) -> None:
    slept: list[float] = []
    limits = Limits(rpm=1, window_s=0.2)
    limiter = RedisLimiter(
        client, limits, lease_s=5, recovery_s=300, min_factor=0.2, max_wait_s=1.0, sleep=slept.append
    )
    limiter.acquire([scope], 1)
    second = limiter.acquire([scope], 1)  # its turn is reserved, then slept until
    assert len(slept) == 1 and 0.15 < slept[0] <= 0.2 and second.waited_s == slept[0]
    with pytest.raises(Deferred):  # a turn further away than max_wait_s goes back to the queue
        RedisLimiter(client, limits, lease_s=5, recovery_s=300, min_factor=0.2, max_wait_s=0.1).acquire(
            [scope], 1
        )


def test_a_call_whose_turn_comes_during_a_pause_waits_for_the_pause_then_asks_again(
    client: redis.Redis, scope: Scope
) -> None:
    limits = Limits(rpm=2, window_s=1.0)
    limiter = RedisLimiter(client, limits, lease_s=5, recovery_s=300, min_factor=0.2, max_wait_s=3.0)
    limiter.acquire([scope], 1)
    pauser = RedisLimiter(client, limits, lease_s=5, recovery_s=300, min_factor=0.2, max_wait_s=3.0)
    paused: list[float] = []
    later = ExitStack()

    def sleep(seconds: float) -> None:
        # The next turn is 500 ms away; a 429 elsewhere pauses everyone for 800 ms meanwhile.
        if not paused:
            paused.append(pauser.pause(scope, 0.8, cut=False)[0])
        later.enter_context(limiter_clock.moved(seconds))

    limiter._sleep = sleep
    with later:
        permit = limiter.acquire([scope], 1)
        assert limiter.paused_for_s(scope) == 0, "it asked again once the pause was over"
    assert paused, "its turn was ahead: it slept"
    assert permit.waited_s >= 0.8
    # The turn it gave up was never sent: it left the window (the first call and this one remain).
    k = keys(scope)
    log, costs, tokens = k.log, k.costs, k.tokens
    assert client.zcard(log) == 2 and client.hlen(costs) == 2 and int(client.get(tokens) or 0) == 2


def test_calls_are_spread_over_the_key_slots(client: redis.Redis) -> None:
    scopes = [Scope("http://127.0.0.1:1/v1", f"m-{uuid.uuid4().hex[:6]}", slot) for slot in range(3)]
    limiter = _limiter(client, rpm=2, window_s=10.0, burst_s=5.0)
    try:
        slots = [limiter.acquire(scopes, 1).scope.key_slot for _ in range(6)]
        assert sorted(slots) == [0, 0, 1, 1, 2, 2]
        with pytest.raises(Deferred):
            limiter.acquire(scopes, 1)
    finally:
        client.delete(*[k for s in scopes for k in keys(s).all()])


# -- no limit in force: no script ---------------------------------------------------------


@pytest.fixture(scope="module")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    """A Redis of this module alone: its command counts are this module's calls."""
    child, url = embedded.start_redis(tmp_path_factory.mktemp("private-redis"))
    with child:
        conn: redis.Redis = redis.Redis.from_url(url)
        yield conn
        conn.close()


def _scripts_run(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "eval"))


def _unlimited_limiter(client: redis.Redis, **options: Any) -> RedisLimiter:
    return RedisLimiter(
        client, Limits(window_s=1.0), lease_s=5, recovery_s=300, min_factor=0.2, max_wait_s=0, **options
    )


def test_once_the_provider_answered_without_limits_calls_run_no_script(private_redis: redis.Redis) -> None:
    client, scope = private_redis, Scope("http://127.0.0.1:1/v1", f"m-{uuid.uuid4().hex[:6]}", 0)
    limiter = _unlimited_limiter(client)
    probe = limiter.acquire([scope], 10)
    assert probe.id, "nothing heard yet: the first call is the probe, through the scripts"
    limiter.release(probe, policy.ProviderLimits())  # answered, no x-ratelimit-* headers
    before = _scripts_run(client)
    for _ in range(50):
        permit = limiter.acquire([scope], 10)
        assert permit.id == ""
        assert limiter.release(permit, policy.ProviderLimits(), 10) == (0.0, 0.0)
    assert _scripts_run(client) == before
    assert client.zcard(keys(scope).log) == 1, "only the probe is in the window"
    configured = RedisLimiter(
        client, Limits(rpm=6_000, window_s=1.0), lease_s=5, recovery_s=300, min_factor=0.2, max_wait_s=0
    )
    assert configured.acquire([scope], 10).id, "a configured limit always goes through the scripts"
    client.delete(*keys(scope).all())


def test_another_process_goes_scriptless_from_its_first_admission_after_the_probe(
    private_redis: redis.Redis,
) -> None:
    client, scope = private_redis, Scope("http://127.0.0.1:1/v1", f"m-{uuid.uuid4().hex[:6]}", 0)
    prober, other = _unlimited_limiter(client), _unlimited_limiter(client, unlimited_recheck_s=60.0)
    probe = prober.acquire([scope], 10)
    with pytest.raises(Deferred, match="probing"):
        other.acquire([scope], 10)  # it looked before the answer: "not yet" for a minute
    prober.release(probe, policy.ProviderLimits())
    assert other.acquire([scope], 10).id, "through the scripts, which say the provider was heard"
    assert other.acquire([scope], 10).id == "", "and from then on without them"
    client.delete(*keys(scope).all())


def test_an_answer_that_states_limits_ends_the_scriptless_calls_at_once(private_redis: redis.Redis) -> None:
    client, scope = private_redis, Scope("http://127.0.0.1:1/v1", f"m-{uuid.uuid4().hex[:6]}", 0)
    client.hset(keys(scope).learned, "seen", 1)  # an earlier answer came without limits
    limiter = _unlimited_limiter(client, unlimited_recheck_s=60.0)
    permit = limiter.acquire([scope], 10)
    assert permit.id == ""
    # 6 a minute: one every 10 s, so that a loaded machine's stall between the two calls below
    # cannot outlast the pace (at 60, a full suite under CI once let the second one in).
    limiter.release(permit, policy.ProviderLimits(limit_requests=6, remaining_requests=5))
    learned = limiter.acquire([scope], 10)
    assert learned.id, "learned like any answer's limits, and paced by them from now on"
    assert limiter.view(scope).learned_rpm == 6
    assert not _try(limiter, scope).admitted, "paced at the learned 6 per window"
    client.delete(*keys(scope).all())


def test_another_workers_pause_holds_a_scriptless_caller_within_the_recheck(
    private_redis: redis.Redis,
) -> None:
    client, scope = private_redis, Scope("http://127.0.0.1:1/v1", f"m-{uuid.uuid4().hex[:6]}", 0)
    client.hset(keys(scope).learned, "seen", 1)
    refused, other = _unlimited_limiter(client), _unlimited_limiter(client, unlimited_recheck_s=0.2)
    assert refused.acquire([scope], 1).id == "" and other.acquire([scope], 1).id == ""
    refused.pause(scope, 1.0)  # a 429: this process waits from its next call on
    with pytest.raises(Deferred, match="paused"):
        refused.acquire([scope], 1)
    with limiter_clock.moved(0.25), pytest.raises(Deferred, match="paused"):
        other.acquire([scope], 1)
    client.delete(*keys(scope).all())


def test_answers_without_limits_keep_what_was_heard_of_the_provider(private_redis: redis.Redis) -> None:
    # release.lua renews it with every answer; without the scripts, each look does.
    client, scope = private_redis, Scope("http://127.0.0.1:1/v1", f"m-{uuid.uuid4().hex[:6]}", 0)
    learned = keys(scope).learned
    client.hset(learned, "seen", 1)
    client.pexpire(learned, 2_000)
    limiter = _unlimited_limiter(client, unlimited_recheck_s=0.1)
    limiter.release(limiter.acquire([scope], 1), policy.ProviderLimits())
    with limiter_clock.moved(0.15):
        assert limiter.acquire([scope], 1).id == ""
    assert client.pttl(learned) > 60_000, "renewed for as long as the headers would have kept it"
    client.delete(*keys(scope).all())


def test_every_key_is_prefixed_and_expires(client: redis.Redis, scope: Scope) -> None:
    limits = Limits(rpm=5, tpm=100, max_inflight=3, window_s=1.0, burst_s=1.0)
    limiter = RedisLimiter(
        client, limits, lease_s=1, recovery_s=300, min_factor=0.2, max_wait_s=default("limiter_max_wait_s")
    )
    limiter.acquire([scope], 10)  # held: its lease stays
    limiter.release(limiter.acquire([scope], 10), policy.ProviderLimits(limit_requests=5))
    limiter.pause(scope, 0.1)
    with limiter_clock.moved(1.05):
        limiter.acquire([scope], 10)  # the first two leave the window for `retired`
    present = [k for k in keys(scope).all() if client.exists(k)]
    # Those that hold the window, the lease, the pacing and the retired admissions are there; the
    # pause's and others' may have run out already on a loaded machine. Whatever is there has the
    # prefix and expires.
    assert {k.rsplit(":", 1)[1] for k in present} >= {"log", "costs", "tokens", "inflight", "pace", "retired"}
    assert all(k.startswith("pipeline:rl:{") for k in present)
    # -1: no expiry; -2: it ran out since it was listed (a loaded machine, once in a full suite).
    assert all(client.pttl(k) != -1 for k in present)


def _hammer(
    redis_url: str, scope: Scope, limit: int, window_s: float, seconds: float, pacing: bool
) -> list[int]:
    """One OS process of callers: returns the Redis times of its admissions (their send times)."""
    from concurrent.futures import ThreadPoolExecutor

    client: redis.Redis = redis.Redis.from_url(redis_url)
    limits = Limits(rpm=limit, window_s=window_s, pacing=pacing, burst_s=0.0)
    limiter = RedisLimiter(client, limits, lease_s=5, recovery_s=300, min_factor=0.2, max_wait_s=0)
    deadline = time.monotonic() + seconds

    def caller() -> list[int]:
        admitted = []
        while time.monotonic() < deadline:
            decision = limiter.try_acquire(scope, 1, uuid.uuid4().hex, max_wait_s=0.05)
            if decision.admitted:
                admitted.append(decision.at_ms + round(decision.wait_s * 1000))
                time.sleep(decision.wait_s)
            else:
                time.sleep(min(decision.wait_s, 0.01))
        return admitted

    with ThreadPoolExecutor(4) as pool:
        return [t for result in pool.map(lambda _: caller(), range(4)) for t in result]


@pytest.mark.parametrize("pacing", [True, False], ids=["paced", "window-only"])
def test_no_window_ever_holds_more_admissions_than_the_limit_across_processes(
    redis_url: str, scope: Scope, pacing: bool
) -> None:
    limit, window_ms = 25, 500
    with ProcessPoolExecutor(4, mp_context=get_context("spawn")) as pool:
        runs = [
            pool.submit(_hammer, redis_url, scope, limit, window_ms / 1000, 2.5, pacing) for _ in range(4)
        ]
        stamps = sorted(t for run in runs for t in run.result())
    assert len(stamps) >= 4 * limit, "the callers kept the limiter busy"
    for i, start in enumerate(stamps):
        in_window = sum(1 for t in stamps[i : i + limit + 1] if t < start + window_ms)
        assert in_window <= limit, f"{in_window} admissions in the window from {start}"
    # Paced, no tenth of the window holds more than a tenth of the quota (+1 for the edges);
    # the window alone lets a whole window's quota through at once.
    tenth = max(
        sum(1 for t in stamps[i : i + limit] if t < start + window_ms / 10) for i, start in enumerate(stamps)
    )
    assert tenth <= limit / 10 + 1 if pacing else tenth >= limit / 2


def test_the_limiter_gives_up_on_a_redis_that_accepts_and_never_answers() -> None:
    # A silent TCP peer (a failover, a NAT that dropped the connection): the kernel completes
    # the handshake on the listening socket, and nothing ever answers. Before the client's
    # timeouts the Lua call was still blocked after 20 s, its thread's lease renewed all along.
    import socket

    import redis

    from pipeline.core.settings import Settings
    from pipeline.llm.ratelimit import RedisLimiter, Scope

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        settings = Settings(
            _env_file=None, redis_url=url, llm_base_url="http://127.0.0.1:9/v1", rate_limit_rpm=60
        )  # type: ignore[call-arg]
        limiter = RedisLimiter.from_settings(settings, 1)
        assert limiter is not None
        with pytest.raises(redis.exceptions.TimeoutError):  # retried as any Redis outage
            limiter.try_acquire(Scope("http://127.0.0.1:9/v1", "m"), 10, "permit-1")
