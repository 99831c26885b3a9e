"""The circuit breaker on real Redis, its time moved through its seam (`circuit.moved`) instead of
slept through."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from pipeline.core import keys as redis_keys
from pipeline.core.settings import Settings
from pipeline.llm import circuit
from pipeline.llm.circuit import Circuit, Gate, Tolerance
from tests.conftest import claimed_redis_db

FIRST_S, MAX_S = 2.0, 30.0


@pytest.fixture
def client(redis_base: str) -> Iterator[redis.Redis]:
    with claimed_redis_db(redis_base) as url:
        made = redis.Redis.from_url(url)
        yield made
        made.close()


def breaker(client: redis.Redis, **kwargs: Any) -> Circuit:
    endpoint = f"http://provider-{uuid.uuid4().hex[:8]}.test:8443/v1"
    options = {"failures": 3, "probe_s": FIRST_S, "probe_max_s": MAX_S, **kwargs}
    return Circuit(client, endpoint, **options)


def opened(cb: Circuit) -> None:
    for _ in range(cb.failures):
        cb.failed(cb.admit(), "UpstreamUnavailable: 503")
    assert cb.admit().verdict == "open"


# --- the breaker alone ---------------------------------------------------------------------


def test_consecutive_failures_open_it_and_an_answer_between_them_resets_the_count(
    client: redis.Redis,
) -> None:
    cb = breaker(client)
    for _ in range(2):
        assert not cb.failed(cb.admit(), "APIConnectionError: refused").open
    cb.answered(cb.admit())  # a success: the two before no longer count
    for _ in range(2):
        assert not cb.failed(cb.admit(), "APIConnectionError: refused").open
    assert cb.admit().verdict == "closed" and cb.admit().failures == 2
    third = cb.failed(cb.admit(), "InternalServerError: 503 overloaded")
    assert third.open and third.changed and third.probe_at_s - third.now_s == pytest.approx(FIRST_S)
    gate = cb.admit()
    assert gate.verdict == "open" and gate.wait_s == pytest.approx(FIRST_S, abs=0.5)
    assert gate.last_error == "InternalServerError: 503 overloaded"


def test_one_probe_at_a_time_spaced_2_4_8_16_30_30_s_on_redis_clock(client: redis.Redis) -> None:
    cb = breaker(client)
    opened(cb)
    shift = FIRST_S
    for expected in (4.0, 8.0, 16.0, 30.0, 30.0):
        with circuit.moved(shift - 0.2):
            assert cb.admit().verdict == "open", "not before its time"
        with circuit.moved(shift):
            probe = cb.admit()
            assert probe.verdict == "probe"
            other = cb.admit()
            assert other.verdict == "open" and other.wait_s <= circuit.POLL_S, "one probe at a time"
            failed = cb.failed(probe, "InternalServerError: 503")
            assert failed.open and not failed.changed
            assert failed.probe_at_s - failed.now_s == pytest.approx(expected)
            assert cb.admit().wait_s == pytest.approx(expected, abs=0.5)
        shift += expected
    assert [circuit.spacing_s(n, FIRST_S, MAX_S) for n in range(1, 6)] == [4.0, 8.0, 16.0, 30.0, 30.0]


def test_the_probes_answer_closes_it_and_its_state_tells_of_the_outage(client: redis.Redis) -> None:
    cb = breaker(client)
    opened(cb)
    with circuit.moved(FIRST_S):
        shown = circuit.state(client, cb.endpoint)
        assert (shown.state, shown.probes, shown.next_probe_in_s) == ("open", 0, 0.0)
        probe = cb.admit()
        assert circuit.state(client, cb.endpoint).state == "probing"
        cb.failed(probe, "InternalServerError: 503")
    with circuit.moved(FIRST_S + 4.0):
        shown = circuit.state(client, cb.endpoint)
        assert shown.state == "open" and shown.probes == 1 and shown.open_for_s == pytest.approx(6.0, abs=0.5)
        assert shown.last_error == "InternalServerError: 503" and shown.opened_at is not None
        closed = cb.answered(cb.admit())
        assert closed.changed and not closed.open and closed.outage_s == pytest.approx(6.0, abs=0.5)
        shown = circuit.state(client, cb.endpoint)
        assert (shown.state, shown.failures, shown.next_probe_in_s) == ("closed", 0, None)
        assert shown.last_outage_s == pytest.approx(6.0, abs=0.5) and shown.last_closed_at is not None
    assert cb.admit().verdict == "closed"
    assert shown.endpoint == cb.endpoint  # no user or password to hide here
    state_key, probe_key = circuit.keys(cb.endpoint)
    assert state_key.startswith(redis_keys.CIRCUIT.prefix) and probe_key.startswith(state_key)
    assert not client.exists(probe_key), "no probe left behind"
    assert 0 < client.pttl(state_key) <= circuit.TTL_S * 1000, "the state expires by itself"


def test_a_probe_that_never_reached_the_endpoint_hands_its_turn_to_the_next_call(client: redis.Redis) -> None:
    cb = breaker(client)
    opened(cb)
    with circuit.moved(FIRST_S):
        probe = cb.admit()
        assert probe.verdict == "probe" and cb.admit().verdict == "open"
        cb.abandoned(probe)  # the limiter deferred it, or the provider said 429
        assert cb.admit().verdict == "probe"


def test_a_killed_probers_turn_comes_back_when_its_lease_runs_out(client: redis.Redis) -> None:
    cb = breaker(client, probe_lease_s=0.3)
    opened(cb)
    with circuit.moved(FIRST_S):
        assert cb.admit().verdict == "probe"  # ... and its worker dies
        deadline = time.monotonic() + 5
        while (gate := cb.admit()).verdict != "probe":
            assert gate.wait_s <= 0.3 and time.monotonic() < deadline
            time.sleep(0.02)


def test_late_failures_of_calls_sent_before_it_opened_leave_the_probes_alone(client: redis.Redis) -> None:
    cb = breaker(client)
    in_flight = [cb.admit() for _ in range(5)]
    for gate in in_flight:
        cb.failed(gate, "APIConnectionError: refused")
    gate = cb.admit()
    assert gate.verdict == "open" and gate.probes == 0 and gate.wait_s == pytest.approx(FIRST_S, abs=0.5)


def test_a_tolerance_names_the_endpoint_and_the_setting() -> None:
    endpoint = "https://user:secret@gateway.example:8443/v1"
    gate = Gate("open", "t", 1.0, opened_at_s=1_000.0, now_s=1_061.0, probes=4, failures=0, last_error="503")
    reason = Tolerance(60.0, None).outlasted(gate, endpoint)
    assert reason is not None and "secret" not in reason
    assert "https://gateway.example:8443/v1" in reason and "61 s" in reason
    assert "PIPELINE_OUTAGE_TOLERANCE_S=60" in reason and "4 probes failed; last: 503" in reason
    assert Tolerance(62.0, None).outlasted(gate, endpoint) is None
    assert Tolerance(None, 1_061.5).outlasted(gate, endpoint) is None
    by_deadline = Tolerance(None, 1_060.0).outlasted(gate, endpoint)
    assert by_deadline is not None and "the run's deadline 1970-01-01T00:17:40+00:00" in by_deadline


def test_the_tolerance_is_the_setting_else_the_runs_deadline_else_two_hours() -> None:
    deadline = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)
    unset = Settings(_env_file=None)  # type: ignore[call-arg]
    assert circuit.tolerance(unset) == Tolerance(7200.0, None)
    with circuit.run_deadline(lambda: deadline):
        assert circuit.tolerance(unset) == Tolerance(None, deadline.timestamp())
        assert circuit.tolerance(Settings(_env_file=None, outage_tolerance_s=90)) == Tolerance(90.0, None)  # type: ignore[call-arg]
    with circuit.run_deadline(lambda: None):
        assert circuit.tolerance(unset) == Tolerance(7200.0, None)
