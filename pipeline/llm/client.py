"""The LLM client: one per process, errors mapped at this one boundary.

Every call first passes the endpoint's circuit breaker (`pipeline.llm.circuit`: while the
endpoint is down, calls wait for its one probe instead of being sent), then the global limiter
(when limits are set); it is retried here on transient failures with capped exponential
backoff and full jitter, and after a 429 sets the shared pause that every worker honours. The
SDK's own retries are off (`max_retries=0`), so a call is never multiplied by two retry loops.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import httpx
import openai
import redis
from pydantic import BaseModel, ValidationError

from pipeline.core import constants as c
from pipeline.core import errors, progress, tracing
from pipeline.core.cost import call_cost
from pipeline.core.redaction import redact
from pipeline.core.retry import backoff_s
from pipeline.core.settings import Settings
from pipeline.llm import circuit, lenient, prompts, stops
from pipeline.llm.ratelimit import Permit, RedisLimiter, Scope, SpendMeter
from pipeline.llm.ratelimit.policy import ProviderLimits, provider_limits, provider_wait_s
from pipeline.llm.structured import ModeStore
from pipeline.llm.tokens import counter_for, estimate_prompt

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
MAX_ERROR_CHARS = 500
CALL_ATTEMPTS = 4
"""Tries of one call on 5xx, dropped connections and timeouts before the task decides."""
RATE_LIMITED_ATTEMPTS = 6
"""Tries of one call refused with 429 (each after the shared pause)."""
PROMPT_RATIO_WEIGHT = 0.1
"""Weight of the newest answer in the moving average of counted / estimated prompt tokens."""
PROMPT_RATIO_MARGIN = 1.05
PROMPT_RATIO_MAX = 2.0
UNCALIBRATED_HORIZON_S = 1.0
"""How far ahead a call reserves its send time before any answer calibrated the estimate."""
CALL_BACKOFF_BASE_S = 1.0
CALL_BACKOFF_CAP_S = 20.0


@dataclass(frozen=True)
class CallRecord:
    """One HTTP call to the model, as stored in `llm_calls`."""

    stage: str
    model: str
    status: str  # ok | invalid | rate_limited | unavailable | rejected | circuit_open
    """circuit_open: never sent, held by the endpoint's open circuit for `limiter_wait_ms`."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: int = 0
    error: str | None = None
    key_slot: int = 0
    limiter_wait_ms: int = 0
    cost_usd: float | None = None
    """None when the model has no price in PIPELINE_LLM_PRICES."""
    mode: str = "sync"
    """sync: asked over HTTP now; batch: a line of a Batch API output file."""


CallSink = Callable[[CallRecord], None]


@dataclass(frozen=True)
class Completion:
    content: str
    finish_reason: str
    record: CallRecord


class LLMClient:
    """Chat completions against one OpenAI-compatible endpoint, over one or more API keys."""

    def __init__(
        self,
        settings: Settings,
        *,
        pool_size: int,
        limiter: RedisLimiter | None = None,
        rng: random.Random | None = None,
        breaker: circuit.Circuit | None = None,
    ) -> None:
        if not settings.llm_base_url:
            raise errors.ConfigError(
                "no LLM endpoint: set PIPELINE_LLM_BASE_URL (or OPENAI_BASE_URL), "
                "or use `pipeline run`, which starts the simulator"
            )
        self.settings = settings
        self.endpoint = settings.llm_base_url
        self.model = settings.llm_model
        self.limiter = limiter
        self._rng = rng or random.Random()
        self._warned_limits: set[tuple[str, int]] = set()
        self._prompt_ratio: dict[str, float] = {}
        """Per model: the provider's prompt tokens / our estimate, a moving average."""
        self._modes = ModeStore(settings.llm_structured_output, limiter.client if limiter else None)
        self.spend = SpendMeter(limiter.client if limiter else None)
        """Capped runs' spend in Redis: `spend.check` before a call, `spending` counts its cost."""
        if breaker is None and limiter is not None:
            breaker = circuit.Circuit.from_settings(settings, limiter.client, self.endpoint)
        self.circuit = breaker
        """The endpoint's circuit breaker, on the limiter's Redis (None without Redis)."""
        self._keys = settings.api_keys()
        self._extract_models = settings.extract_models()
        self._prices = settings.prices()
        limits = httpx.Limits(max_connections=pool_size, max_keepalive_connections=pool_size)
        self._http = httpx.Client(limits=limits, timeout=settings.llm_timeout_s)
        self._clients = [
            openai.OpenAI(
                base_url=self.endpoint,
                api_key=key,
                max_retries=0,
                timeout=settings.llm_timeout_s,
                http_client=self._http,
            )
            for key in self._keys
        ]

    def close(self) -> None:
        self._http.close()

    def spending(self, run_id: str, sink: CallSink) -> CallSink:
        """`sink`, with each call's cost also counted against the run's budget as it is made (for
        `spend.check`, which then needs no query before each call of a capped run)."""

        def record(call: CallRecord) -> None:
            sink(call)
            if call.cost_usd:
                self.spend.add(run_id, call.cost_usd)

        return record

    def pick_model(self, stage: str, failed_attempts: int = 0) -> str:
        """The model for a call: weighted among the extract models, the fallback model once
        the task has failed `llm_fallback_after` times."""
        fallback = self.settings.llm_fallback_model
        if fallback and failed_attempts >= self.settings.llm_fallback_after:
            return fallback
        if stage != "extract":
            return self.model
        names, weights = zip(*self._extract_models, strict=True)
        return str(self._rng.choices(names, weights=weights)[0])

    def warm_up(self) -> None:
        """Load at start-up what a process's first call would load on its way (the SDK's
        lazily imported resources, each model's token counter), so that the first call of a
        run does not wait for imports."""
        for model in {
            *self.extract_model_names(),
            self.pick_model("compress"),
            self.pick_model("synthesize"),
        }:
            counter_for(model)
        for client in self._clients:
            _ = client.chat.completions.with_raw_response

    def extract_model_names(self) -> list[str]:
        """Every model an extract call may go to (stored answers of these can be reused)."""
        names = [name for name, _ in self._extract_models]
        if self.settings.llm_fallback_model:
            names.append(self.settings.llm_fallback_model)
        return names

    def text(
        self,
        messages: list[prompts.Message],
        *,
        stage: str,
        max_tokens: int,
        sink: CallSink,
        model: str | None = None,
    ) -> str:
        """A plain-text answer."""
        done = self._complete(
            messages, stage=stage, model=model or self.model, max_tokens=max_tokens, sink=sink
        )
        sink(done.record)
        return done.content.strip()

    def structured(
        self,
        messages: list[prompts.Message],
        schema: type[M],
        *,
        stage: str,
        max_tokens: int,
        sink: CallSink,
        model: str | None = None,
    ) -> M:
        """An answer validated against `schema`, repaired once with the validation error.

        Raises SchemaViolation when the repaired answer does not validate either.
        """
        model = model or self.model
        done, asked, fmt = self._first_answer(messages, schema, stage, model, max_tokens, sink)
        return self.settle_structured(done, asked, schema, model, max_tokens, sink, fmt)

    def settle_structured(
        self,
        done: Completion,
        asked: list[prompts.Message],
        schema: type[M],
        model: str,
        max_tokens: int,
        sink: CallSink,
        fmt: dict[str, Any] | None = None,
    ) -> M:
        """The answer `done` to `asked`, validated; repaired once, and the rest of a cut-off
        answer asked for, with calls made now (also for a Batch API line's answer)."""
        reading, problem = _read(done, schema, sink)
        if reading.value is not None:
            return self._and_the_rest(reading.value, asked, done, schema, model, max_tokens, sink, fmt)
        retry = prompts.repair_messages(asked, done.content, problem)
        done = self._complete(retry, stage="repair", model=model, max_tokens=max_tokens, sink=sink, fmt=fmt)
        reading, problem = _read(done, schema, sink, max_dropped=None)
        if reading.value is None:
            assert reading.error is not None
            # Garbled (not cut off at max_tokens, which would recur): worth asking again later.
            if done.finish_reason != "length" and all(
                e["type"] == "json_invalid" for e in reading.error.errors()
            ):
                raise errors.MalformedAnswer(f"answer was not JSON, even after repair: {problem}") from None
            raise errors.SchemaViolation(f"answer did not validate after repair: {problem}") from None
        return self._and_the_rest(reading.value, retry, done, schema, model, max_tokens, sink, fmt)

    def batch_body(
        self, messages: list[prompts.Message], schema: type[BaseModel], model: str, max_tokens: int
    ) -> tuple[dict[str, Any], list[prompts.Message]]:
        """The body a Batch API line sends for a structured answer, in the structured-output
        mode the endpoint takes (as the synchronous call would ask), and its messages."""
        asked, fmt = prompts.structured_request(messages, schema, self._modes.current(self.endpoint, model))
        body: dict[str, Any] = {"model": model, "messages": asked, "max_tokens": max_tokens, "temperature": 0}
        if fmt:
            body["response_format"] = fmt
        return body, asked

    def _first_answer(
        self,
        messages: list[prompts.Message],
        schema: type[BaseModel],
        stage: str,
        model: str,
        max_tokens: int,
        sink: CallSink,
    ) -> tuple[Completion, list[prompts.Message], dict[str, Any] | None]:
        """The first answer, the request that got it and its format: with `auto`, each mode the
        endpoint rejects is stepped down from (under the probe, so that a call waiting its turn
        asks in the new mode)."""
        while True:
            with self._modes.probing(self.endpoint, model):
                mode = self._modes.current(self.endpoint, model)
                asked, fmt = prompts.structured_request(messages, schema, mode)
                try:
                    done = self._complete(
                        asked, stage=stage, model=model, max_tokens=max_tokens, sink=sink, fmt=fmt
                    )
                except errors.FormatRejected as exc:
                    lower = self._modes.step_down(self.endpoint, model, mode) if self._modes.auto else None
                    if lower is None:
                        how = (
                            "no mode was left"
                            if self._modes.auto
                            else "set PIPELINE_LLM_STRUCTURED_OUTPUT=auto"
                        )
                        raise errors.FormatRejected(
                            f"the endpoint rejects structured output as {mode} ({how}): {exc}"
                        ) from None
                    log.warning(
                        "%s rejects structured output as %s: asking as %s from now on", model, mode, lower
                    )
                    continue
                self._modes.confirm(self.endpoint, model)
                return done, asked, fmt

    def _and_the_rest(
        self,
        kept: M,
        asked: list[prompts.Message],
        done: Completion,
        schema: type[M],
        model: str,
        max_tokens: int,
        sink: CallSink,
        fmt: dict[str, Any] | None,
    ) -> M:
        """`kept`, and when its answer was cut off at max_tokens, the items the cut left out:
        one more call asks for them. The kept items stand whatever that call answers."""
        if done.finish_reason != "length":
            return kept
        ask = prompts.rest_messages(asked, done.content, kept.model_dump(mode="json"))
        try:
            rest = self._complete(ask, stage="rest", model=model, max_tokens=max_tokens, sink=sink, fmt=fmt)
        except errors.PipelineError as exc:
            log.warning("asking for the rest of a cut-off answer failed, the kept items stand: %s", exc)
            return kept
        reading, _ = _read(rest, schema, sink)
        return kept if reading.value is None else lenient.combine(kept, reading.value)

    def _complete(
        self,
        messages: list[prompts.Message],
        *,
        stage: str,
        model: str,
        max_tokens: int,
        sink: CallSink,
        fmt: dict[str, Any] | None = None,
    ) -> Completion:
        """One answer, retrying transient failures here; every HTTP attempt is recorded."""
        estimate = estimate_prompt(model, messages)
        tokens = self._calibrated(model, estimate) + max_tokens
        scopes = [Scope(self.endpoint, model, slot) for slot in range(len(self._clients))]
        failures = refusals = 0
        waited_s = 0.0
        while True:
            gate = self._through_circuit(stage, model, sink)
            try:
                permit = self._acquire(scopes, tokens, waited_s)
            except BaseException:
                self._tell_circuit(gate, "abandoned")  # a probe that never went: the next call's turn
                raise
            # PIPELINE_LIMITER_MAX_WAIT_S bounds the call's waits in place, over all its attempts;
            # each attempt's record carries its own.
            permit = replace(permit, waited_s=permit.waited_s - waited_s)
            waited_s += permit.waited_s
            try:
                done = self._send(permit, messages, stage=stage, model=model, max_tokens=max_tokens, fmt=fmt)
            except _Failure as failure:
                error = failure.error
                held = self._tell_circuit(gate, failure.outcome, str(error))
                if isinstance(error, errors.RateLimited) and self.limiter:
                    # First the pause, so that no worker sends into the refusal meanwhile.
                    # A burst refused while the window had room asks for a small cut, a spent quota
                    # (our limit is above the provider's) for a large one.
                    decrease = c.AIMD_DECREASE if error.quota_spent else c.AIMD_BURST_DECREASE
                    self.limiter.pause(
                        permit.scope, error.retry_after_s or c.DEFAULT_PAUSE_S, decrease=decrease
                    )
                sink(failure.record)
            except BaseException:
                self._tell_circuit(gate, "abandoned")
                raise
            else:
                self._tell_circuit(gate, "answered")
                self._calibrate(model, estimate, done.record.prompt_tokens)
                return done
            if held:
                continue  # the circuit is open: the next try waits for its probe, no failure counted
            if isinstance(error, errors.RateLimited):
                refusals += 1
                if refusals >= RATE_LIMITED_ATTEMPTS:
                    raise error
                if not self.limiter:
                    time.sleep(backoff_s(refusals, error.retry_after_s, rng=self._rng))
            elif isinstance(error, errors.UpstreamUnavailable):
                failures += 1
                if failures >= CALL_ATTEMPTS:
                    raise error
                time.sleep(
                    backoff_s(
                        failures - 1, base_s=CALL_BACKOFF_BASE_S, cap_s=CALL_BACKOFF_CAP_S, rng=self._rng
                    )
                )
            else:
                raise error

    def _through_circuit(self, stage: str, model: str, sink: CallSink) -> circuit.Gate | None:
        """The call's pass through the endpoint's circuit (None: no circuit, or its Redis did not
        answer: the call goes). While the circuit is open the call waits for the next probe, in
        place up to PIPELINE_LIMITER_MAX_WAIT_S; a longer wait raises Deferred (the probe as the
        countdown), an outage past its tolerance OutageOutlasted. A held call is recorded once,
        as `circuit_open`, with how long it was held."""
        if self.circuit is None:
            return None
        held_s, gate, tolerance, span = 0.0, None, None, None
        with ExitStack() as held_span:
            try:
                while (gate := self._admit()) is not None and gate.verdict == "open":
                    if tolerance is None:
                        tolerance = circuit.tolerance(self.settings)
                        attributes = {"llm.stage": stage, "llm.model": model, "llm.circuit": "open"}
                        span = held_span.enter_context(tracing.span("llm.held", attributes))
                    if (reason := tolerance.outlasted(gate, self.endpoint)) is not None:
                        raise errors.OutageOutlasted(reason)
                    wait = circuit.next_look_s(gate, tolerance)
                    if held_s + wait > self.settings.limiter_max_wait_s:
                        described = circuit.describe(gate, self.endpoint)
                        raise errors.Deferred(f"{described}: back at its next probe", retry_after_s=wait)
                    self.circuit.hold(wait)
                    held_s += wait
                return gate
            finally:
                if (gate is not None and gate.verdict == "open") or held_s:
                    sink(self._held(stage, model, held_s, gate))
                    self.circuit.count_held(held_s)
                if span is not None:
                    span.set_attribute("llm.held_s", round(held_s, 3))

    def _admit(self) -> circuit.Gate | None:
        assert self.circuit is not None
        try:
            return self.circuit.admit()
        except redis.RedisError as exc:
            # The breaker protects the provider; its Redis being down must not stop the calls.
            log.warning("the circuit breaker's Redis did not answer (%s): the call goes", exc)
            return None

    def _held(self, stage: str, model: str, held_s: float, gate: circuit.Gate | None) -> CallRecord:
        """The record of a call the open circuit held (never sent)."""
        described = circuit.describe(gate, self.endpoint) if gate is not None else "its circuit was open"
        return CallRecord(
            stage,
            model,
            c.CALL_HELD,
            limiter_wait_ms=int(held_s * 1000),
            error=f"held, not sent: {described}"[:MAX_ERROR_CHARS],
            cost_usd=call_cost(self._prices, model, 0, 0),
        )

    def _tell_circuit(self, gate: circuit.Gate | None, outcome: str, error: str = "") -> bool:
        """Tell the circuit what became of the call it let through; True when the circuit is
        open now (the failed call is held, not counted as a failed try)."""
        if gate is None or self.circuit is None:
            return False
        try:
            if outcome == "failed":
                return self.circuit.failed(gate, error).open
            if outcome == "answered":
                self.circuit.answered(gate)
            elif gate.verdict == "probe":  # abandoned: only a probe holds anything
                self.circuit.abandoned(gate)
        except redis.RedisError as exc:
            log.warning("the circuit breaker could not record a call's outcome: %s", exc)
        return False

    def _acquire(self, scopes: list[Scope], tokens: int, waited_s: float) -> Permit:
        if self.limiter is None:
            return Permit(self._rng.choice(scopes), "", tokens, 0.0)
        # Until an answer has calibrated this model's estimate, its cost is a guess (and errs
        # high): such calls reserve only a short way ahead.
        calibrated = scopes[0].model in self._prompt_ratio
        horizon = None if calibrated else UNCALIBRATED_HORIZON_S
        return self.limiter.acquire(scopes, tokens, waited_s=waited_s, horizon_s=horizon)

    def _send(
        self,
        permit: Permit,
        messages: list[prompts.Message],
        *,
        stage: str,
        model: str,
        max_tokens: int,
        fmt: dict[str, Any] | None,
    ) -> Completion:
        """One HTTP call, as a span of the document's trace (`pipeline.core.tracing`): its
        stage, model, status, tokens and latency; never the prompt or the answer."""
        with tracing.span("llm.call", {"llm.stage": stage, "llm.model": model}) as current:
            try:
                done = self._send_once(
                    permit, messages, stage=stage, model=model, max_tokens=max_tokens, fmt=fmt
                )
            except _Failure as failure:
                _trace_record(current, failure.record)
                raise
            _trace_record(current, done.record)
            return done

    def _send_once(
        self,
        permit: Permit,
        messages: list[prompts.Message],
        *,
        stage: str,
        model: str,
        max_tokens: int,
        fmt: dict[str, Any] | None,
    ) -> Completion:
        self._go_ahead(permit)
        record = CallRecord(
            stage, model, "ok", key_slot=permit.scope.key_slot, limiter_wait_ms=int(permit.waited_s * 1000)
        )
        kwargs: dict[str, Any] = {"response_format": fmt} if fmt else {}
        started = time.monotonic()
        try:
            # Within its HTTP timeout, the call keeps the lease it works under (progress).
            with progress.blocking(self.settings.llm_timeout_s):
                raw = self._clients[permit.scope.key_slot].chat.completions.with_raw_response.create(
                    model=model,
                    messages=messages,  # type: ignore[arg-type]
                    max_tokens=max_tokens,
                    temperature=0,
                    **kwargs,
                )
            told = provider_limits(raw.headers)
            response = raw.parse()
        except openai.APIError as exc:
            said = provider_limits(exc.response.headers) if isinstance(exc, openai.APIStatusError) else None
            error = self._map_error(exc, said)
            # A refused call was not charged tokens (a provider that counts them says so in its
            # headers, and the limiter then follows them); a call that failed otherwise may
            # have been, so its reservation stays.
            self._settle(permit, said, 0 if isinstance(error, errors.RateLimited) else None)
            latency_ms = int((time.monotonic() - started) * 1000)
            status = _STATUS_OF[type(error)]
            cost = call_cost(self._prices, model, 0, 0)  # no answer, no usage: nothing billed
            raise _Failure(
                error,
                replace(record, status=status, latency_ms=latency_ms, error=str(error), cost_usd=cost),
                _circuit_outcome(exc, error),
            ) from None
        choice = response.choices[0]
        usage = response.usage
        # The quota was charged the prompt and max_tokens, whatever the answer used.
        self._settle(permit, told, usage.prompt_tokens + max_tokens if usage else None)
        return Completion(
            content=choice.message.content or "",
            finish_reason=choice.finish_reason or "stop",
            record=replace(
                record,
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
                latency_ms=int((time.monotonic() - started) * 1000),
                cost_usd=call_cost(
                    self._prices,
                    model,
                    usage.prompt_tokens if usage else 0,
                    usage.completion_tokens if usage else 0,
                ),
            ),
        )

    def _go_ahead(self, permit: Permit) -> None:
        """Right before the request goes out, once admitted: a cancelled run's call is not sent
        (`pipeline.llm.stops`), and its permit is handed back unused."""
        try:
            stops.before_call()
        except BaseException:
            self._settle(permit, None, 0)
            raise

    def _calibrated(self, model: str, estimate: int) -> int:
        """The prompt estimate scaled by what the provider has been counting for this model: a
        reservation far above the charge holds back the window until its refund."""
        ratio = self._prompt_ratio.get(model)
        if ratio is None:
            return estimate
        return math.ceil(estimate * min(PROMPT_RATIO_MAX, ratio * PROMPT_RATIO_MARGIN))

    def _calibrate(self, model: str, estimate: int, counted: int) -> None:
        if estimate <= 0 or counted <= 0:
            return
        seen = counted / estimate
        ratio = self._prompt_ratio.get(model)
        self._prompt_ratio[model] = seen if ratio is None else ratio + PROMPT_RATIO_WEIGHT * (seen - ratio)

    def _settle(self, permit: Permit, told: ProviderLimits | None, charged_tokens: int | None = None) -> None:
        """End the permit and hand the limiter what the provider said of its limits."""
        if told is not None:
            self._warn_above_provider(told)
        if self.limiter:
            try:
                pushed = self.limiter.release(permit, told, charged_tokens)
            except redis.RedisError as exc:
                # An answer the provider has given (and billed) is never thrown away for the
                # limiter's bookkeeping: the lease expires by itself, the refund is forgone.
                log.warning("the limiter could not record the end of a call: %s", exc)
                return
            if any(pushed):
                log.info(
                    "the provider has less room than our window leaves: pacing moved %.2f s (requests) "
                    "and %.2f s (tokens) later",
                    *pushed,
                )

    def _warn_above_provider(self, told: ProviderLimits) -> None:
        """A configured limit above the provider's own figure: the provider's is used."""
        for kind, configured, stated in (
            ("PIPELINE_RATE_LIMIT_RPM", self.settings.rate_limit_rpm, told.limit_requests),
            ("PIPELINE_RATE_LIMIT_TPM", self.settings.rate_limit_tpm, told.limit_tokens),
        ):
            if stated and configured > stated and (kind, stated) not in self._warned_limits:
                self._warned_limits.add((kind, stated))
                log.warning(
                    "%s=%d is above the provider's own limit (%d, from its x-ratelimit headers): "
                    "using the provider's",
                    kind,
                    configured,
                    stated,
                )

    def _map_error(self, exc: openai.APIError, told: ProviderLimits | None) -> errors.PipelineError:
        # Redacted before it is cut: a key cut in two would no longer be found.
        message = redact(f"{type(exc).__name__}: {exc}", self.settings)[:MAX_ERROR_CHARS]
        if isinstance(exc, openai.RateLimitError):
            spent = told.spent if told is not None else True
            return errors.RateLimited(message, provider_wait_s(exc.response.headers), quota_spent=spent)
        if isinstance(exc, openai.APIStatusError) and _names_the_format(exc):
            return errors.FormatRejected(message)
        if isinstance(exc, openai.APIStatusError) and exc.status_code < 500:
            return errors.ProviderRejected(f"{_rejection(exc)}: {message}")
        # 5xx, timeouts, dropped connections, bodies that are not JSON at all
        return errors.UpstreamUnavailable(message)


class _Failure(Exception):
    """A failed HTTP attempt: the mapped error, the record of the attempt, and what it tells the
    circuit breaker (failed, answered or abandoned)."""

    def __init__(self, error: errors.PipelineError, record: CallRecord, outcome: str) -> None:
        super().__init__(str(error))
        self.error = error
        self.record = record
        self.outcome = outcome


def _circuit_outcome(exc: openai.APIError, error: errors.PipelineError) -> str:
    """failed: no answer (connection failure, timeout) or a 5xx that is no format rejection;
    abandoned: a 429 (the limiter's business); answered: the endpoint answered otherwise."""
    if isinstance(error, errors.RateLimited):
        return "abandoned"
    if isinstance(exc, openai.APIConnectionError):
        return "failed"
    if isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
        return "answered" if isinstance(error, errors.FormatRejected) else "failed"
    return "answered"


def _rejection(exc: openai.APIStatusError) -> str:
    """What a 4xx other than 429 means for the run, in words (retrying will not change it)."""
    text = str(exc)
    if exc.status_code == 401:
        return "the endpoint refused the API key (PIPELINE_LLM_API_KEY)"
    if exc.status_code == 403:
        return "the API key may not use this model or endpoint"
    if exc.status_code == 404:
        return "the endpoint has no such model (PIPELINE_LLM_MODEL)"
    if exc.code == "context_length_exceeded" or "context length" in text:
        return (
            "the request exceeds the model's context window "
            "(set PIPELINE_MODEL_CONTEXT_TOKENS to the model's, or lower PIPELINE_CHUNK_TOKENS)"
        )
    if exc.code == "unsupported_parameter" or "Unsupported parameter" in text:
        return "the endpoint does not take a parameter the pipeline sends"
    return "the endpoint rejected the request"


def _names_the_format(exc: openai.APIStatusError) -> bool:
    """A 400 or 422, or a 5xx, whose body names the request's response_format."""
    if exc.status_code not in (400, 422) and exc.status_code < 500:
        return False
    try:
        body = exc.response.text
    except Exception:  # a streamed or closed body: the message is all there is
        body = str(exc)
    return "response_format" in body or "json_schema" in body


_STATUS_OF: dict[type[errors.PipelineError], str] = {
    errors.RateLimited: "rate_limited",
    errors.ProviderRejected: "rejected",
    errors.FormatRejected: "rejected",
    errors.UpstreamUnavailable: "unavailable",
}


def _read(
    done: Completion, schema: type[M], sink: CallSink, max_dropped: int | None = lenient.MAX_DROPPED
) -> tuple[lenient.Reading[M], str]:
    """The answer read as models write it, and its call recorded: `ok` with what was mended, or
    `invalid` with why (the second value, "" when it validated)."""
    reading = lenient.read(done.content, schema, done.finish_reason, max_dropped)
    if reading.value is not None:
        sink(_with_notes(done.record, reading.notes))
        return reading, ""
    assert reading.error is not None
    problem = _describe(reading.error, done.finish_reason)
    sink(replace(done.record, status="invalid", error=problem))
    return reading, problem


def _with_notes(record: CallRecord, notes: list[str]) -> CallRecord:
    """An answer that validated once mended: its record says what was mended (status ok)."""
    if not notes:
        return record
    return replace(record, error=f"mended: {'; '.join(notes)}"[:MAX_ERROR_CHARS])


def _describe(exc: ValidationError, finish_reason: str) -> str:
    lines = [f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors()[:8]]
    if finish_reason == "length":
        lines.insert(0, "the answer was cut off at max_tokens")
    return "; ".join(lines)[:MAX_ERROR_CHARS]


def _trace_record(current: Any, record: CallRecord) -> None:
    current.set_attributes(
        {
            "llm.status": record.status,
            "llm.prompt_tokens": record.prompt_tokens,
            "llm.completion_tokens": record.completion_tokens,
            "llm.latency_ms": record.latency_ms,
            "llm.limiter_wait_ms": record.limiter_wait_ms,
        }
    )
    if record.status != "ok":
        tracing.mark_error(current, record.status)
