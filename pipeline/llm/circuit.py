"""The circuit breaker: one per LLM endpoint, shared by every worker in Redis.

    closed ──(PIPELINE_CIRCUIT_FAILURES consecutive failures, any worker's)──► open
    open ──(the probe is due: one call takes the probe's lease and goes)──► answered: closed
                                                                      └──► failed: open, the
                                                                           next probe later

A failure is a connection failure, a timeout or a 5xx; any other answer (a 4xx included: the
endpoint is up) to a call sent after the latest failure resets the count (an answer to one sent
before it says nothing of the endpoint now), and a 429 neither counts nor resets (pacing is the
rate limiter's business). Nor does a failure of a call sent before the circuit last closed count:
it timed out over the outage the probe ended, and would re-open the circuit that just closed.
One request that always fails is no outage: the consecutive failures open the circuit only when
they are of two requests or more, and a probe failed by the request that failed the probe before
counts against that request's own tries (`Outcome.repeats`), not as the endpoint's.
While the circuit is open no call is sent: each waits for the next probe, in place for up to
PIPELINE_LIMITER_MAX_WAIT_S (the wait told to the lease's watcher, so the document keeps its
lease), else the task goes back to the queue with the probe as countdown
(`Deferred`: no retry spent). The probes are spaced PIPELINE_CIRCUIT_PROBE_S, doubling after
each failed one, at most PIPELINE_CIRCUIT_PROBE_MAX_S: work resumes within that of the
provider's return. An outage longer than PIPELINE_OUTAGE_TOLERANCE_S (unset: until the run's
deadline, else 2 hours) fails the calls still waiting (`OutageOutlasted`).

Every decision reads Redis's clock (TIME in the scripts; `moved` is the tests' seam), never a
host's: hosts' clocks may be minutes apart.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlsplit

import redis

from pipeline.core import constants as c
from pipeline.core import keys as redis_keys
from pipeline.core import progress, replies
from pipeline.core.clock_shift import ClockShift
from pipeline.core.settings import Settings, default
from pipeline.llm.circuit_scripts import (
    AdmitArgs,
    CircuitKeys,
    Gate,
    Outcome,
    OutcomeArgs,
    OutcomeName,
    script,
)

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How soon a held call looks again while another call's probe is out (a probe under a 503
answers in milliseconds; one under a silent endpoint takes its HTTP timeout)."""
PROBE_LEASE_EXTRA_S = 5.0
"""The probe's lease outlives its limiter wait and HTTP timeout by this: a worker killed
mid-probe holds the others back that long at most."""
TTL_S = 24 * 60 * 60
"""The state outlives its last outcome by this: `state` still tells of the last outage."""
JITTER = 0.05
"""Held calls look again up to 5 % later than told, so that they do not all ask at once."""
MAX_ERROR_CHARS = 300

_shift = ClockShift()
DeadlineOf = Callable[[], datetime | None]
"""Looks up the run's deadline (None: it has none): asked only once an outage holds a call."""
_deadline_of: ContextVar[DeadlineOf | None] = ContextVar("pipeline_circuit_deadline", default=None)


@dataclass(frozen=True)
class Tolerance:
    """How long an outage is waited out: `seconds` from its start, or until `deadline_s`."""

    seconds: float | None
    deadline_s: float | None
    """Unix seconds (the run's deadline), when `seconds` is None."""
    configured: bool = True
    """False: `seconds` is the default (nothing set, no deadline)."""

    def left_s(self, gate: Gate) -> float:
        """How long the outage `gate` saw may still last before the waiting calls fail."""
        if self.seconds is not None:
            return self.seconds - gate.outage_s
        assert self.deadline_s is not None
        return self.deadline_s - gate.now_s

    def outlasted(self, gate: Gate, endpoint: str) -> str | None:
        """Why the waiting call fails now (the endpoint and the setting named), or None."""
        if gate.verdict != "open" or self.left_s(gate) > 0:
            return None
        if self.seconds is not None and self.configured:
            limit = f"PIPELINE_OUTAGE_TOLERANCE_S={self.seconds:g}"
        elif self.seconds is not None:
            limit = (
                f"the default tolerance of {self.seconds:g} s (PIPELINE_OUTAGE_TOLERANCE_S is unset and "
                "the run has no deadline)"
            )
        else:
            assert self.deadline_s is not None
            limit = (
                f"the run's deadline {_iso(self.deadline_s)} (PIPELINE_OUTAGE_TOLERANCE_S is unset: an "
                "outage is waited out until the run's deadline)"
            )
        return f"{describe(gate, endpoint)}: waited past {limit}"


@dataclass(frozen=True)
class CircuitState:
    """What `pipeline status` and the report show of an endpoint's circuit."""

    endpoint: str
    state: Literal["closed", "open", "probing"]
    failures: int
    """Consecutive failures counted while closed."""
    opened_at: str | None
    """ISO time the current outage began (Redis's clock)."""
    open_for_s: float
    probes: int
    """Probes that failed in the current outage."""
    next_probe_in_s: float | None
    last_error: str | None
    last_outage_s: float | None
    """How long the last outage that ended lasted."""
    last_closed_at: str | None
    outages: int = 0
    """How many times it opened (within TTL_S of the last failure)."""
    held_calls: int = 0
    """Calls it held, and how long in all (`Circuit.count_held`)."""
    held_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def keys(endpoint: str) -> CircuitKeys:
    """The endpoint's state and probe keys."""
    return CircuitKeys.of(endpoint)


def endpoint_label(url: str) -> str:
    """The endpoint as messages show it: scheme, host, port and path, never a user or password."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def spacing_s(failed_probes: int, first_s: float, max_s: float) -> float:
    """The wait before the next probe after `failed_probes` failed (what circuit_outcome.lua does)."""
    return float(min(max_s, first_s * 2.0**failed_probes))


def describe(gate: Gate, endpoint: str) -> str:
    """The outage in one phrase: the endpoint, since when, the probes, the last error."""
    last = f"; last: {gate.last_error}" if gate.last_error else ""
    return (
        f"the LLM endpoint {endpoint_label(endpoint)} has been unavailable for {gate.outage_s:.0f} s "
        f"(circuit open since {_iso(gate.opened_at_s)}, {gate.probes} probes failed{last})"
    )


@contextmanager
def run_deadline(deadline_of: DeadlineOf) -> Iterator[None]:
    """While the block runs, this thread's calls (and those it hands to a pool with a copied
    context) wait out an outage until the run's deadline, looked up with `deadline_of` once an
    outage holds one, when PIPELINE_OUTAGE_TOLERANCE_S is unset."""
    token = _deadline_of.set(deadline_of)
    try:
        yield
    finally:
        _deadline_of.reset(token)


def tolerance(settings: Settings) -> Tolerance:
    """PIPELINE_OUTAGE_TOLERANCE_S; unset: until the run's deadline (`run_deadline`), else 2 hours."""
    if settings.outage_tolerance_s is not None:
        return Tolerance(settings.outage_tolerance_s, None)
    deadline_of = _deadline_of.get()
    deadline = None
    if deadline_of is not None:
        try:
            deadline = deadline_of()
        except Exception as exc:  # the database: the default tolerance holds meanwhile
            log.warning("the run's deadline could not be read (%s): waiting out the outage 2 hours", exc)
    if deadline is not None:
        moment = deadline if deadline.tzinfo else deadline.replace(tzinfo=UTC)
        return Tolerance(None, moment.timestamp())
    return Tolerance(float(c.UNSET_OUTAGE_TOLERANCE_S), None, configured=False)


moved = _shift.moved
"""Tests: while the block runs, this process's circuit decisions see Redis's clock `seconds`
later (a probe falls due, a tolerance runs out) without waiting for it."""


class Circuit:
    """One endpoint's breaker; every call asks `admit` first and tells its outcome after."""

    def __init__(
        self,
        client: redis.Redis,
        endpoint: str,
        *,
        failures: int = default("circuit_failures"),
        probe_s: float = default("circuit_probe_s"),
        probe_max_s: float = default("circuit_probe_max_s"),
        probe_lease_s: float = default("limiter_max_wait_s") + default("llm_timeout_s") + PROBE_LEASE_EXTRA_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.endpoint = endpoint
        self.failures = failures
        self.probe_s = probe_s
        self.probe_max_s = probe_max_s
        self.probe_lease_ms = max(1, int(probe_lease_s * 1000))
        self._sleep = sleep
        self._keys = keys(endpoint)
        self._admit = client.register_script(script("circuit_admit.lua"))
        self._outcome = client.register_script(script("circuit_outcome.lua"))

    @classmethod
    def from_settings(cls, settings: Settings, client: redis.Redis, endpoint: str) -> Circuit:
        """The endpoint's breaker on `client` (the limiter's Redis, whose clients carry
        REDIS_CLIENT_OPTIONS' timeouts), with the settings' thresholds."""
        return cls(
            client,
            endpoint,
            failures=settings.circuit_failures,
            probe_s=settings.circuit_probe_s,
            probe_max_s=settings.circuit_probe_max_s,
            probe_lease_s=settings.limiter_max_wait_s + settings.llm_timeout_s + PROBE_LEASE_EXTRA_S,
        )

    def admit(self) -> Gate:
        """One atomic look: the call may go (closed), goes as the probe, or must wait."""
        token = uuid.uuid4().hex
        args = AdmitArgs(token, self.probe_lease_ms, int(POLL_S * 1000), _shift.ms)
        with progress.blocking():
            reply = self._admit(keys=self._keys.keys(), args=args.args())
        return Gate.parse(reply, token)

    def answered(self, gate: Gate) -> Outcome:
        """The endpoint answered the call (anything but a 5xx or a 429): the circuit closes,
        unless the call was let through before it opened (the probe decides then)."""
        outcome = self._tell("answered", gate)
        if outcome.changed:
            log.warning(
                "the circuit of %s closed: the endpoint answered after an outage of %.0f s (%d probes failed)",
                endpoint_label(self.endpoint),
                outcome.outage_s,
                outcome.probes,
            )
        return outcome

    def failed(self, gate: Gate, error: str, request: str | None = None) -> Outcome:
        """The call got no answer or a 5xx: counted, and the probe's failure spaces the next one.
        `request` fingerprints what was sent (None: a request of its own): consecutive failures
        open the circuit only when they are of two requests or more (one request failing alone
        is that request's fault), and `repeats` says how many probes in a row it failed."""
        outcome = self._tell("failed", gate, error, request or gate.token)
        if outcome.changed:
            log.warning(
                "the circuit of %s opened after %d consecutive failures (last: %s): calls wait, "
                "one probe at a time tries again",
                endpoint_label(self.endpoint),
                outcome.failures,
                error[:MAX_ERROR_CHARS],
            )
        return outcome

    def abandoned(self, gate: Gate) -> Outcome:
        """The call never reached the endpoint (the limiter deferred it) or got a 429: a probe
        hands its turn to the next call, and nothing is counted."""
        return self._tell("abandoned", gate)

    def _tell(self, outcome: OutcomeName, gate: Gate, error: str = "", request: str = "") -> Outcome:
        args = OutcomeArgs(
            outcome=outcome,
            token=gate.token,
            failures=self.failures,
            probe_ms=int(self.probe_s * 1000),
            probe_max_ms=int(self.probe_max_s * 1000),
            ttl_ms=TTL_S * 1000,
            error=error[:MAX_ERROR_CHARS],
            shift_ms=_shift.ms,
            admitted_ms=gate.at_ms,
            label=endpoint_label(self.endpoint),
            request=request or gate.token,
        )
        with progress.blocking():
            return Outcome.parse(self._outcome(keys=self._keys.keys(), args=args.args()))

    def count_held(self, seconds: float) -> None:
        """Count a call the open circuit held, and how long, for the metrics (best effort: the
        record of the held call is what the run keeps)."""
        try:
            with self.client.pipeline(transaction=False) as pipe:
                pipe.hincrby(self._keys.state, "held_calls", 1)
                pipe.hincrby(self._keys.state, "held_ms", int(seconds * 1000))
                pipe.execute()
        except redis.RedisError as exc:
            log.debug("the circuit's Redis did not count a held call: %s", exc)

    def hold(self, seconds: float) -> None:
        """Wait `seconds` for the next probe: a blocking call as long as the wait (the lease's
        watcher keeps the document's lease for it)."""
        with progress.blocking(seconds):
            self._sleep(seconds)


def next_look_s(gate: Gate, tolerance: Tolerance) -> float:
    """How long a held call waits before it asks again: until the probe (jittered), and no
    later than the tolerance's end, when it fails."""
    wait = gate.wait_s * (1 + random.random() * JITTER)
    return max(0.001, min(wait, tolerance.left_s(gate)))


def state(client: redis.Redis, endpoint: str) -> CircuitState:
    """The endpoint's circuit now, read without changing it (on Redis's clock)."""
    where = keys(endpoint)
    with client.pipeline(transaction=False) as pipe:
        pipe.time()
        pipe.hgetall(where.state)
        pipe.pttl(where.probe)
        (seconds, micros), raw, probe_ttl_ms = pipe.execute()
    return _state(endpoint_label(endpoint), raw, int(probe_ttl_ms), _now_s(seconds, micros))


def states(client: redis.Redis) -> list[CircuitState]:
    """Every endpoint's circuit this Redis holds (those that failed in the last TTL_S), read
    without changing them: what the metrics export. An endpoint is named by the label its
    failures stored (its tag, for a state written before labels were)."""
    scanned = map(replies.text, client.scan_iter(match=redis_keys.CIRCUIT.of("*"), count=500))
    bases = sorted({key for key in scanned if not key.endswith(":probe")})
    if not bases:
        return []
    with client.pipeline(transaction=False) as pipe:
        pipe.time()
        for base in bases:
            pipe.hgetall(base)
            pipe.pttl(f"{base}:probe")
        (seconds, micros), *answers = pipe.execute()
    now_s = _now_s(seconds, micros)
    found = []
    for base, raw, probe_ttl_ms in zip(bases, answers[::2], answers[1::2], strict=True):
        if raw:  # expired between the scan and the read
            tag_only = base.removeprefix(redis_keys.CIRCUIT.prefix)
            label = replies.text(raw.get(b"endpoint") or raw.get("endpoint") or tag_only)
            found.append(_state(label, raw, int(probe_ttl_ms), now_s))
    return found


def _now_s(seconds: Any, micros: Any) -> float:
    return int(seconds) + int(micros) / 1e6 + _shift.ms / 1000


def _state(label: str, raw: dict[Any, Any], probe_ttl_ms: int, now_s: float) -> CircuitState:
    fields = replies.fields(raw)
    opened_s = int(fields.get("opened_ms", 0)) / 1000
    closed_s = int(fields.get("closed_ms", 0)) / 1000
    last_opened_s = int(fields.get("last_opened_ms", 0)) / 1000
    probe_at_s = int(fields.get("probe_at_ms", 0)) / 1000
    probing = opened_s > 0 and probe_ttl_ms > 0
    return CircuitState(
        endpoint=label,
        state="probing" if probing else ("open" if opened_s else "closed"),
        failures=int(fields.get("failures", 0)),
        opened_at=_iso(opened_s) if opened_s else None,
        open_for_s=round(now_s - opened_s, 1) if opened_s else 0.0,
        probes=int(fields.get("probes", 0)),
        next_probe_in_s=round(max(0.0, probe_at_s - now_s), 1) if opened_s else None,
        last_error=fields.get("last_error") or None,
        last_outage_s=round(closed_s - last_opened_s, 1) if closed_s and last_opened_s else None,
        last_closed_at=_iso(closed_s) if closed_s else None,
        outages=int(fields.get("outages", 0)),
        held_calls=int(fields.get("held_calls", 0)),
        held_s=int(fields.get("held_ms", 0)) / 1000,
    )


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="seconds")
