"""The circuit breaker on real Redis, its time moved through its seam (`circuit.moved`) instead of
slept through; then the LLM client through it against the simulator's outage, over real HTTP."""

from __future__ import annotations

import json
import random
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import Engine

from pipeline.core import errors, tracing
from pipeline.core import keys as redis_keys
from pipeline.core.settings import Settings
from pipeline.llm import circuit
from pipeline.llm.circuit import Circuit, Tolerance
from pipeline.llm.circuit_scripts import Gate
from pipeline.llm.client import CALL_ATTEMPTS, CallRecord, LLMClient
from pipeline.llm.ratelimit import RedisLimiter
from pipeline.recovery.heartbeat import Heartbeat
from pipeline.recovery.leases import Leases
from pipeline.runs import status
from pipeline.storage import clock
from pipeline_dev.sim import SimConfig, SimServer
from tests.conftest import claimed_redis_db
from tests.test_liveness import _left_s, _started

FIRST_S, MAX_S = 2.0, 30.0
MESSAGES: Any = [{"role": "user", "content": "Hello there. How are you?"}]


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


def test_answers_to_calls_sent_before_the_latest_failure_do_not_reset_the_count(
    client: redis.Redis,
) -> None:
    """A provider that goes down still answers the requests it took just before: those answers
    arrive among its refusals and must not hold the circuit closed while refused calls retry."""
    cb = breaker(client)
    sent_before = [cb.admit() for _ in range(3)]
    with circuit.moved(0.05):  # the provider goes down: what is sent from now on is refused
        for gate in sent_before[:2]:
            assert not cb.failed(cb.admit(), "InternalServerError: 503").open
            late = cb.answered(gate)
            assert not late.open and not late.changed and late.failures == cb.admit().failures
        assert cb.admit().failures == 2, "the answers to calls sent before did not reset it"
        third = cb.failed(cb.admit(), "InternalServerError: 503")
        assert third.open and third.changed
        assert cb.answered(sent_before[2]).open, "nor do they close it once open"


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
    where = circuit.keys(cb.endpoint)
    assert where.state.startswith(redis_keys.CIRCUIT.prefix) and where.probe.startswith(where.state)
    assert not client.exists(where.probe), "no probe left behind"
    assert 0 < client.pttl(where.state) <= circuit.TTL_S * 1000, "the state expires by itself"


def test_status_reads_the_endpoints_circuit(redis_base: str) -> None:
    with claimed_redis_db(redis_base) as url:
        cb = breaker(redis.Redis.from_url(url))
        settings = Settings(_env_file=None, redis_url=url, llm_base_url=cb.endpoint)  # type: ignore[call-arg]
        closed = status.circuit_view(settings)
        assert closed is not None and closed["state"] == "closed" and closed["last_outage_s"] is None
        opened(cb)
        shown = status.circuit_view(settings)
        assert shown is not None and shown["state"] == "open" and shown["endpoint"] == cb.endpoint
        assert shown["next_probe_in_s"] == pytest.approx(FIRST_S, abs=0.5)
        cb.client.close()
    no_redis = Settings(_env_file=None, redis_url=None, limiter_redis_url=None, llm_base_url=cb.endpoint)  # type: ignore[call-arg]
    assert status.circuit_view(no_redis) is None, "no Redis configured (the environment's ignored)"


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


def test_late_outcomes_of_calls_sent_before_it_opened_leave_it_to_the_probe(client: redis.Redis) -> None:
    """Calls in flight when the outage began: their failures change nothing more, and an answer
    to one sent just before says nothing of the endpoint now (it does not close the circuit)."""
    cb = breaker(client)
    in_flight = [cb.admit() for _ in range(6)]
    for gate in in_flight[:5]:
        cb.failed(gate, "APIConnectionError: refused")
    late = cb.answered(in_flight[5])
    assert late.open and not late.changed
    gate = cb.admit()
    assert gate.verdict == "open" and gate.probes == 0 and gate.wait_s == pytest.approx(FIRST_S, abs=0.5)


def test_failures_of_calls_sent_before_it_closed_do_not_count_after_the_probe_closed_it(
    client: redis.Redis,
) -> None:
    """Calls admitted before the outage whose failures arrive after the probe closed the circuit
    (their HTTP timeout outlasted the outage) say nothing of the endpoint now: counting them
    re-opened a circuit that had just closed."""
    cb = breaker(client)
    in_flight = [cb.admit() for _ in range(cb.failures + 2)]  # sent just before the outage
    opened(cb)
    with circuit.moved(FIRST_S):
        assert cb.answered(cb.admit()).changed, "the probe's answer closes it"
        for gate in in_flight:  # their timeouts come in now
            late = cb.failed(gate, "APITimeoutError: timed out")
            assert not late.open and not late.changed and late.failures == 0
        assert cb.admit().verdict == "closed" and cb.admit().failures == 0
        assert circuit.state(client, cb.endpoint).last_error == "UpstreamUnavailable: 503"
        fresh = cb.admit()
    with circuit.moved(FIRST_S + 0.01):  # a call sent after the close still counts
        assert cb.failed(fresh, "InternalServerError: 503").failures == 1
        for _ in range(cb.failures - 1):
            last = cb.failed(cb.admit(), "InternalServerError: 503")
        assert last.open and last.changed


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
    by_default = Tolerance(60.0, None, configured=False).outlasted(gate, endpoint)
    assert (
        by_default is not None
        and "PIPELINE_OUTAGE_TOLERANCE_S is unset and the run has no deadline" in by_default
    )


def test_the_tolerance_is_the_setting_else_the_runs_deadline_else_two_hours() -> None:
    deadline = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)
    unset = Settings(_env_file=None)  # type: ignore[call-arg]
    assert circuit.tolerance(unset) == Tolerance(7200.0, None, configured=False)
    with circuit.run_deadline(lambda: deadline):
        assert circuit.tolerance(unset) == Tolerance(None, deadline.timestamp())
        assert circuit.tolerance(Settings(_env_file=None, outage_tolerance_s=90)) == Tolerance(90.0, None)  # type: ignore[call-arg]
    with circuit.run_deadline(lambda: None):
        assert circuit.tolerance(unset) == Tolerance(7200.0, None, configured=False)


# --- the client through it, against the simulator's outage ---------------------------------


class _NoJitter(random.Random):
    """Backoff without its random part: a failed try is tried again at once."""

    def uniform(self, a: float, b: float) -> float:
        return a


def start_outage(sim: SimServer, seconds: float, kind: str = "503") -> dict[str, Any]:
    body = json.dumps({"seconds": seconds, "kind": kind}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{sim.port}/sim/outage", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request) as answer:
        return dict(json.load(answer))


OUTAGE_FAILURES = 5
"""The client's circuit opens at the fifth failure: two of other requests (`others_failed`), then
the third of the call under test (one request failing alone is no outage)."""


def others_failed(url: str, sim: SimServer, count: int = 2) -> None:
    """`count` other requests (each its own) failed at the endpoint just now, as in an outage
    every calling thread's do: the circuit's count of consecutive failures is theirs and more."""
    client = redis.Redis.from_url(url)
    cb = Circuit(client, sim.base_url, failures=OUTAGE_FAILURES)
    for _ in range(count):
        cb.failed(cb.admit(), "InternalServerError: 503")
    client.close()


def llm(sim: SimServer, url: str, breaker: Circuit | None = None, **overrides: Any) -> LLMClient:
    options: dict[str, Any] = {
        "llm_base_url": sim.base_url,
        "redis_url": url,
        "llm_model": f"circuit-{uuid.uuid4().hex[:6]}",
        "circuit_failures": OUTAGE_FAILURES,
        "limiter_max_wait_s": 0,  # every wait for the circuit goes back to the queue: nothing sleeps
        "rate_limit_learn": False,  # no limiter's probe for headers: a dropped call tells none
    }
    settings = Settings(_env_file=None, **{**options, **overrides})  # type: ignore[call-arg]
    limiter = RedisLimiter.from_settings(settings, 2)
    return LLMClient(settings, pool_size=2, limiter=limiter, rng=_NoJitter(), breaker=breaker)


def ask(client: LLMClient, records: list[CallRecord]) -> str:
    return client.text(MESSAGES, stage="extract", max_tokens=20, sink=records.append)


@pytest.mark.parametrize("kind", ["503", "reset"])
def test_while_the_circuit_is_open_no_call_is_sent_and_none_spends_a_try(redis_base: str, kind: str) -> None:
    """Refused (503) or dropped (reset): the third failure opens the circuit within the first call,
    which goes back to the queue instead of failing; the calls after it are held without a request;
    the probe alone reaches the provider, and its answer closes the circuit."""
    with claimed_redis_db(redis_base) as url, SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        client = llm(sim, url)
        records: list[CallRecord] = []
        start_outage(sim, 600, kind)
        others_failed(url, sim)
        with pytest.raises(errors.Deferred) as deferred:
            ask(client, records)
        assert [r.status for r in records] == ["unavailable"] * 3 + ["circuit_open"], "under CALL_ATTEMPTS"
        assert CALL_ATTEMPTS > 3 and "has been unavailable" in str(deferred.value)
        assert deferred.value.retry_after_s == pytest.approx(FIRST_S, rel=0.2), "back at the probe"
        for _ in range(5):
            with pytest.raises(errors.Deferred):
                ask(client, records)
        assert sim.stats()["outage"]["refused"] == 3, "held calls send nothing"
        assert [r.status for r in records[4:]] == ["circuit_open"] * 5
        assert all(r.latency_ms == 0 and "held, not sent" in (r.error or "") for r in records[3:])
        with circuit.moved(FIRST_S):
            with pytest.raises(errors.Deferred):
                ask(client, records)  # the probe: refused again
            assert sim.stats()["outage"]["refused"] == 4
            assert [r.status for r in records[-2:]] == ["unavailable", "circuit_open"]
        start_outage(sim, 0)  # the provider is back
        with circuit.moved(FIRST_S + 4.0):
            assert ask(client, records)  # the probe answers: closed
            assert ask(client, records)
        assert [r.status for r in records[-2:]] == ["ok", "ok"]
        assert circuit.state(client.circuit.client, sim.base_url).state == "closed"  # type: ignore[union-attr]
        client.close()


def test_a_probe_the_endpoint_answers_with_a_refusal_closes_the_circuit(redis_base: str) -> None:
    """A 401 is an answer: the endpoint is up, and the call fails for its own reason at once
    instead of every document waiting out the tolerance as if the provider were down."""
    with (
        claimed_redis_db(redis_base) as url,
        SimServer(SimConfig(p50_s=0, p95_s=0, api_key="sk-other")) as sim,
    ):
        client = llm(sim, url)
        records: list[CallRecord] = []
        start_outage(sim, 600)  # refused before the key is looked at
        others_failed(url, sim)
        with pytest.raises(errors.Deferred):
            ask(client, records)
        start_outage(sim, 0)
        with circuit.moved(FIRST_S), pytest.raises(errors.ProviderRejected, match="refused the API key"):
            ask(client, records)
        assert circuit.state(redis.Redis.from_url(url), sim.base_url).state == "closed"
        assert [r.status for r in records] == ["unavailable"] * 3 + ["circuit_open", "rejected"]
        client.close()


def test_an_outage_past_its_tolerance_fails_the_call_naming_the_endpoint_and_the_setting(
    redis_base: str,
) -> None:
    with claimed_redis_db(redis_base) as url, SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        client = llm(sim, url, outage_tolerance_s=600)
        untold = llm(sim, url)  # the same endpoint, no tolerance set: the run's deadline's
        records: list[CallRecord] = []
        start_outage(sim, 3600)
        others_failed(url, sim)
        with pytest.raises(errors.Deferred):
            ask(client, records)
        with circuit.moved(599):
            with pytest.raises(errors.Deferred):
                ask(client, records)
        with circuit.moved(601):
            with pytest.raises(errors.OutageOutlasted) as outlasted:
                ask(client, records)
            soon = datetime.now(UTC) + timedelta(seconds=300)
            with circuit.run_deadline(lambda: soon), pytest.raises(errors.OutageOutlasted) as past_deadline:
                ask(untold, records)
            with circuit.run_deadline(lambda: soon + timedelta(hours=1)), pytest.raises(errors.Deferred):
                ask(untold, records)
        assert f"the LLM endpoint {sim.base_url} has been unavailable for 60" in str(outlasted.value)
        assert "PIPELINE_OUTAGE_TOLERANCE_S=600" in str(outlasted.value)
        assert "the run's deadline" in str(past_deadline.value)
        assert isinstance(outlasted.value, errors.PermanentError), "the document fails with it"
        assert records[-1].status == "circuit_open"
        client.close()
        untold.close()


def test_a_call_held_in_place_keeps_its_lease_for_the_wait_and_goes_at_the_probe(
    engine: Engine, redis_base: str, tmp_path: Path
) -> None:
    """With room to wait in place (PIPELINE_LIMITER_MAX_WAIT_S), a held call sleeps until the next
    probe: a blocking call as long as the wait, so its lease is renewed through it up to the wait
    plus a lease and not past it; then it is the probe, which the provider (back) answers."""
    lease_s = 2.0
    with claimed_redis_db(redis_base) as url, SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        redis_client = redis.Redis.from_url(url)
        leases = Leases(lease_s=lease_s, owner=f"host:2:held-{uuid.uuid4().hex[:6]}")
        beat = Heartbeat(engine, redis_client, leases, lambda taken: None, lambda run_id: None)
        doc_id, fence = _started(engine, tmp_path, leases)
        slept: list[float] = []
        later = ExitStack()

        def sleep(wait_s: float) -> None:  # the breaker's seam: the beats come during its sleep
            slept.append(wait_s)
            later.enter_context(circuit.moved(wait_s))  # ... which ends when it has lasted
            beat.renew()  # the beat that first sees the wait counts its bound from now
            # 1.5 s before the bound: a loaded CI machine once took 0.7 s from renew to the check.
            with clock.moved(wait_s + lease_s - 1.5):
                beat.renew()
                assert _left_s(engine, doc_id) > 0 and leases.working(doc_id), "renewed through the wait"
            with clock.moved(wait_s + lease_s + 0.5):
                beat.renew()
                assert not leases.working(doc_id), "not past its bound"
            start_outage(sim, 0)  # the provider comes back while the call waits

        held = Circuit(redis_client, sim.base_url, failures=OUTAGE_FAILURES, probe_s=FIRST_S, sleep=sleep)
        client = llm(sim, url, held, limiter_max_wait_s=30)
        records: list[CallRecord] = []
        start_outage(sim, 600)
        others_failed(url, sim)
        with later, leases.holding(doc_id, fence):
            answer = ask(client, records)
        assert answer and slept and slept[0] == pytest.approx(FIRST_S, rel=0.1)
        assert [r.status for r in records] == ["unavailable"] * 3 + ["circuit_open", "ok"]
        assert records[3].limiter_wait_ms == pytest.approx(slept[0] * 1000, abs=1)
        client.close()
        redis_client.close()


def test_a_held_call_is_a_span_of_its_documents_trace_before_the_call_that_goes(
    redis_base: str, exporter: InMemorySpanExporter
) -> None:
    """Held calls never reach the HTTP call's span: the wait is a span of its own, `llm.held`,
    as long as the hold, in the document's trace, before the probe's `llm.call`."""
    with claimed_redis_db(redis_base) as url, SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        redis_client = redis.Redis.from_url(url)
        later = ExitStack()

        def sleep(wait_s: float) -> None:
            later.enter_context(circuit.moved(wait_s))
            start_outage(sim, 0)

        held = Circuit(redis_client, sim.base_url, failures=OUTAGE_FAILURES, probe_s=FIRST_S, sleep=sleep)
        client = llm(sim, url, held, limiter_max_wait_s=30)
        records: list[CallRecord] = []
        start_outage(sim, 600)
        others_failed(url, sim)
        exporter.clear()
        with later, tracing.span("document.extract") as parent:
            assert ask(client, records)
        trace_id = parent.get_span_context().trace_id
        spans = [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]
        names = [s.name for s in sorted(spans, key=lambda s: s.start_time or 0)]
        assert names == ["document.extract"] + ["llm.call"] * 3 + ["llm.held", "llm.call"]
        (wait,) = [s for s in spans if s.name == "llm.held"]
        assert wait.attributes is not None and wait.attributes["llm.held_s"] == pytest.approx(
            FIRST_S, rel=0.1
        )
        assert wait.attributes["llm.stage"] == "extract"
        assert circuit.state(redis_client, sim.base_url).held_calls == 1
        client.close()
        redis_client.close()


def test_status_says_an_open_circuit_and_the_calls_it_held() -> None:
    """`pipeline status`'s rows for an outage: open now, or the last one that ended."""
    from pipeline.cli.results import outage_notes

    open_now = {
        "state": "open",
        "open_for_s": 95.2,
        "probes": 4,
        "next_probe_in_s": 16.0,
        "last_error": "HTTP 503",
    }
    (outage, held) = outage_notes(open_now, 1_234)
    assert outage[0] == "outage" and "failed for 95 s" in outage[1] and "4 probes failed" in outage[1]
    assert held == ("held calls", "1,234 calls held by the open circuit, never sent")
    ended = {"state": "closed", "last_outage_s": 300.4, "last_closed_at": "2026-12-03T02:05:00Z"}
    assert outage_notes(ended, 0) == [("outage", "the last one lasted 300 s, over at 2026-12-03T02:05:00Z")]
    assert outage_notes(None, 0) == []


# --- one request that always fails is no outage (issue 47) --------------------------------

POISONED: Any = [{"role": "user", "content": "This request always fails. [[sim:fail-503]]"}]


def ask_poisoned(client: LLMClient, records: list[CallRecord]) -> str:
    return client.text(POISONED, stage="extract", max_tokens=20, sink=records.append)


def test_one_request_failing_alone_spends_its_own_tries_and_holds_no_one(
    client: redis.Redis, redis_base: str
) -> None:
    """A request the endpoint always answers with a 5xx (the simulator's `[[sim:fail-503]]`) is
    not an outage: its failures, however many, do not open the circuit, so its call fails after
    its own tries (then its task's, as documented), and the healthy call after it goes at once."""
    cb = breaker(client)
    for _ in range(cb.failures + 2):
        assert not cb.failed(cb.admit(), "InternalServerError: 503", "the same request").open
    assert cb.admit().verdict == "closed", "one request's failures alone"
    assert cb.failed(cb.admit(), "InternalServerError: 503", "another request").open, (
        "two requests: an outage"
    )
    with claimed_redis_db(redis_base) as url, SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        llm_client = llm(sim, url, circuit_failures=3)
        records: list[CallRecord] = []
        for _ in range(2):  # the call, then its task's retry: each fails after its own tries
            with pytest.raises(errors.UpstreamUnavailable):
                ask_poisoned(llm_client, records)
        assert [r.status for r in records] == ["unavailable"] * (2 * CALL_ATTEMPTS)
        assert circuit.state(llm_client.circuit.client, sim.base_url).state == "closed"  # type: ignore[union-attr]
        assert ask(llm_client, records) and records[-1].status == "ok", "not held behind it"
        llm_client.close()


def test_a_request_failing_the_probe_again_and_again_fails_its_call_not_the_endpoint(redis_base: str) -> None:
    """An outage (failures of several requests) opened the circuit; the provider is back, but
    the call that keeps taking the probe is the bad request: its first failed probe may be the
    endpoint's, each one after it counts against its own tries, so it fails within its tries
    (instead of holding the circuit open until the outage tolerance), and the next probe, a
    healthy call's, closes the circuit."""
    with claimed_redis_db(redis_base) as url, SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        llm_client = llm(sim, url)
        others_failed(url, sim, OUTAGE_FAILURES)
        assert circuit.state(llm_client.circuit.client, sim.base_url).state == "open"  # type: ignore[union-attr]
        records: list[CallRecord] = []
        shift = 0.0
        for failed_probes in range(1, CALL_ATTEMPTS + 2):
            shift += circuit.spacing_s(failed_probes - 1, FIRST_S, MAX_S)
            with circuit.moved(shift):
                if failed_probes <= CALL_ATTEMPTS:
                    with pytest.raises(errors.Deferred):  # back at the next probe, a try spent
                        ask_poisoned(llm_client, records)
                else:
                    with pytest.raises(errors.UpstreamUnavailable):
                        ask_poisoned(llm_client, records)
        sent = [r.status for r in records if r.status != "circuit_open"]
        assert sent == ["unavailable"] * (CALL_ATTEMPTS + 1), "its first failed probe, then its tries"
        shift += circuit.spacing_s(CALL_ATTEMPTS + 1, FIRST_S, MAX_S)
        with circuit.moved(shift):
            assert ask(llm_client, records) and records[-1].status == "ok"
            assert circuit.state(llm_client.circuit.client, sim.base_url).state == "closed"  # type: ignore[union-attr]
        llm_client.close()
