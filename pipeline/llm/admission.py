"""A call's pass through the endpoint's circuit breaker (`pipeline.llm.circuit`), and the
outcome reported back to it.

While the circuit is open a call waits for the next probe, in place up to
PIPELINE_LIMITER_MAX_WAIT_S; a longer wait raises Deferred (the probe as the countdown), an
outage past its tolerance OutageOutlasted. The breaker protects the provider: its Redis being
down never stops the calls.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import dataclass

import redis

from pipeline.core import constants as c
from pipeline.core import errors, tracing
from pipeline.core.cost import Price, call_cost
from pipeline.core.settings import Settings
from pipeline.llm import circuit
from pipeline.llm.circuit_scripts import Gate
from pipeline.llm.request import MAX_ERROR_CHARS, CallRecord, LLMRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reported:
    """What the circuit made of a call's outcome, for the call's own count of tries."""

    held: bool = False
    """The circuit is open and the failure is not the call's own: no try is counted."""
    own_failures: int = 0
    """The call's failed tries the circuit counted as its own (the probes its request failed in a
    row, after the first): a count that outlives a deferral, which starts the call afresh."""


class CircuitPass:
    def __init__(
        self, breaker: circuit.Circuit | None, settings: Settings, endpoint: str, prices: dict[str, Price]
    ) -> None:
        self.breaker = breaker
        self._settings = settings
        self._endpoint = endpoint
        self._prices = prices

    def enter(self, request: LLMRequest) -> Gate | None:
        """The call's gate through the circuit (None: no circuit, or its Redis did not answer:
        the call goes). A held call is recorded once, as `circuit_open`, with how long it was
        held."""
        if self.breaker is None:
            return None
        held_s, gate, tolerance, span = 0.0, None, None, None
        with ExitStack() as held_span:
            try:
                while (gate := self._admit()) is not None and gate.verdict == "open":
                    if tolerance is None:
                        tolerance = circuit.tolerance(self._settings)
                        attributes = {
                            "llm.stage": request.stage,
                            "llm.model": request.model,
                            "llm.circuit": "open",
                        }
                        span = held_span.enter_context(tracing.span("llm.held", attributes))
                    if (reason := tolerance.outlasted(gate, self._endpoint)) is not None:
                        raise errors.OutageOutlasted(reason)
                    wait = circuit.next_look_s(gate, tolerance)
                    if held_s + wait > self._settings.limiter_max_wait_s:
                        described = circuit.describe(gate, self._endpoint)
                        raise errors.Deferred(f"{described}: back at its next probe", retry_after_s=wait)
                    self.breaker.hold(wait)
                    held_s += wait
                return gate
            finally:
                if (gate is not None and gate.verdict == "open") or held_s:
                    request.sink(self._held(request, held_s, gate))
                    self.breaker.count_held(held_s)
                if span is not None:
                    span.set_attribute("llm.held_s", round(held_s, 3))

    def report(
        self, gate: Gate | None, outcome: str, error: str = "", request: str | None = None
    ) -> Reported:
        """Report to the circuit what became of the call it let through (failed, answered or
        abandoned; `request`: its fingerprint); held when the circuit is open now and the failure
        is not the request's own (it is then not counted as a failed try)."""
        if gate is None or self.breaker is None:
            return Reported()
        try:
            if outcome == "failed":
                told = self.breaker.failed(gate, error, request)
                own = max(0, told.repeats - 1)  # the first failed probe: the endpoint's, maybe
                return Reported(held=told.open and not own, own_failures=own)
            if outcome == "answered":
                self.breaker.answered(gate)
            elif gate.verdict == "probe":  # abandoned: only a probe holds anything
                self.breaker.abandoned(gate)
        except redis.RedisError as exc:
            log.warning("the circuit breaker could not record a call's outcome: %s", exc)
        return Reported()

    def _admit(self) -> Gate | None:
        assert self.breaker is not None
        try:
            return self.breaker.admit()
        except redis.RedisError as exc:
            # The breaker protects the provider; its Redis being down must not stop the calls.
            log.warning("the circuit breaker's Redis did not answer (%s): the call goes", exc)
            return None

    def _held(self, request: LLMRequest, held_s: float, gate: Gate | None) -> CallRecord:
        """The record of a call the open circuit held (never sent)."""
        described = circuit.describe(gate, self._endpoint) if gate is not None else "its circuit was open"
        return CallRecord(
            request.stage,
            request.model,
            c.CALL_HELD,
            limiter_wait_ms=int(held_s * 1000),
            error=f"held, not sent: {described}"[:MAX_ERROR_CHARS],
            cost_usd=call_cost(self._prices, request.model, 0, 0),
        )
