"""The circuit breaker's Lua scripts on the Python side: each one's KEYS, ARGV and reply, by name.

`circuit_admit.lua` (may a call go now?) and `circuit_outcome.lua` (what became of it) open with
their contract (KEYS[i], ARGV[i], the reply); the dataclasses here list the same fields in the
same order, as the limiter's do (`pipeline.llm.ratelimit.scripts`), so no other code reaches a
key or an argument by position. Replies are parsed with `pipeline.core.replies`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from pipeline.core import keys as redis_keys
from pipeline.core import replies
from pipeline.llm.ratelimit.scripts import InScriptOrder, ScriptArgs

Verdict = Literal["closed", "probe", "open"]
VERDICTS: tuple[Verdict, ...] = ("closed", "probe", "open")
"""circuit_admit.lua's verdict 0, 1, 2."""


def tag(endpoint: str) -> str:
    return hashlib.sha256(endpoint.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CircuitKeys(InScriptOrder):
    """An endpoint's keys: one prefix, one hash tag (a cluster keeps them together)."""

    state: str
    """HASH failures, opened_ms, probe_at_ms, probes, last_error; closed_ms, last_opened_ms,
    last_probes once an outage ended; endpoint, outages, held_calls, held_ms for the metrics"""
    probe: str
    """STRING the token of the call probing the open endpoint, PX its lease"""

    @classmethod
    def of(cls, endpoint: str) -> CircuitKeys:
        base = redis_keys.CIRCUIT.of(f"{{{tag(endpoint)}}}")
        return cls(state=base, probe=f"{base}:probe")

    def keys(self) -> list[str]:
        return self._values()


@dataclass(frozen=True)
class AdmitArgs(ScriptArgs):
    token: str
    lease_ms: int
    """the probe's lease: its limiter wait and HTTP timeout"""
    poll_ms: int
    """how soon to look again while another call's probe is out"""
    shift_ms: int
    """added to Redis TIME: 0 but in tests, which move the clock instead of sleeping"""


@dataclass(frozen=True)
class Gate:
    """Whether a call may go: circuit_admit.lua's reply, on Redis's clock."""

    verdict: Verdict
    token: str
    """The call's own: the probe's lease holds it."""
    wait_s: float
    """open: until the next probe is due (or a poll, while a probe is out)."""
    opened_at_s: float
    """Unix seconds the circuit opened (0: closed)."""
    now_s: float
    probes: int
    """Probes that failed since it opened."""
    failures: int
    last_error: str
    at_ms: int = 0
    """When the call was let through (Redis ms): an answer to a call let through before the
    circuit opened does not close it."""

    @classmethod
    def parse(cls, reply: list[Any], token: str) -> Gate:
        """{verdict, wait_ms, opened_ms, now_ms, probes, failures, last_error}"""
        verdict, wait_ms, opened_ms, now_ms, probes, failures, last_error = reply
        return cls(
            verdict=VERDICTS[replies.integer(verdict)],
            token=token,
            wait_s=replies.integer(wait_ms) / 1000,
            opened_at_s=replies.integer(opened_ms) / 1000,
            now_s=replies.integer(now_ms) / 1000,
            probes=replies.integer(probes),
            failures=replies.integer(failures),
            last_error=replies.text(last_error),
            at_ms=replies.integer(now_ms),
        )

    @property
    def outage_s(self) -> float:
        return self.now_s - self.opened_at_s if self.opened_at_s else 0.0


OutcomeName = Literal["answered", "failed", "abandoned"]


@dataclass(frozen=True)
class OutcomeArgs(ScriptArgs):
    outcome: OutcomeName
    token: str
    failures: int
    """consecutive failures that open the circuit"""
    probe_ms: int
    """the first probe's spacing"""
    probe_max_ms: int
    """the longest spacing"""
    ttl_ms: int
    """of the keys, from the last outcome"""
    error: str
    """the failure, in words"""
    shift_ms: int
    admitted_ms: int
    """when the call was let through (circuit_admit.lua's now)"""
    label: str
    """the endpoint's label (no credentials), for the metrics"""
    request: str
    """the request's fingerprint: one request's failures alone never open the circuit"""


@dataclass(frozen=True)
class Outcome:
    """The circuit after a call's outcome was told: circuit_outcome.lua's reply."""

    open: bool
    changed: bool
    """This outcome opened the circuit, or closed it."""
    opened_at_s: float
    """Of the outage (of the one that ended, when it closed)."""
    probes: int
    now_s: float
    probe_at_s: float
    failures: int
    repeats: int = 0
    """The probes this call's request failed in a row (0: it failed no probe)."""

    @classmethod
    def parse(cls, reply: list[Any]) -> Outcome:
        """{open, opened_ms, probes, now_ms, probe_at_ms, failures, changed, repeats}"""
        is_open, opened_ms, probes, now_ms, probe_at_ms, failures, changed, repeats = reply
        return cls(
            open=replies.flag(is_open),
            changed=replies.flag(changed),
            opened_at_s=replies.integer(opened_ms) / 1000,
            probes=replies.integer(probes),
            now_s=replies.integer(now_ms) / 1000,
            probe_at_s=replies.integer(probe_at_ms) / 1000,
            failures=replies.integer(failures),
            repeats=replies.integer(repeats),
        )

    @property
    def outage_s(self) -> float:
        return self.now_s - self.opened_at_s if self.opened_at_s else 0.0


def script(name: str) -> str:
    return resources.files("pipeline.llm").joinpath(name).read_text(encoding="utf-8")
