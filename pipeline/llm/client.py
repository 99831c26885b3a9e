"""The LLM client: one per process, errors mapped at this one boundary.

Every call first passes the endpoint's circuit breaker (`pipeline.llm.admission`: while the
endpoint is down, calls wait for its one probe instead of being sent), then the global limiter
(`pipeline.llm.pacing`, when limits are set); it is retried here on transient failures as
`pipeline.llm.retry_policy` decides, and after a 429 sets the shared pause that every worker
honours. The SDK's own retries are off (`max_retries=0`), so a call is never multiplied by two
retry loops.

One `LLMRequest` (`pipeline.llm.request`) goes down the call path: `text` and `structured`
build it, `_complete` retries it, `_send` makes one HTTP attempt of it in small steps (the
HTTP call, the provider's rate-limit headers, the error mapping in `pipeline.llm.failures`,
the limiter's release, the cost and the record).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar, cast

import httpx
import openai
from openai.types.chat import ChatCompletion
from pydantic import BaseModel

from pipeline.core import errors, progress, tracing
from pipeline.core.cost import call_cost
from pipeline.core.settings import Settings
from pipeline.llm import circuit, prompts, spending, stops, warm
from pipeline.llm.admission import CircuitPass
from pipeline.llm.answers import StructuredAnswers
from pipeline.llm.cache_keys import CacheKeys
from pipeline.llm.failures import STATUS_OF, Failure, circuit_outcome, map_error
from pipeline.llm.pacing import Pacing
from pipeline.llm.ratelimit import Permit, RedisLimiter, Scope, SpendMeter
from pipeline.llm.ratelimit.budget import Recorded
from pipeline.llm.ratelimit.policy import ProviderLimits, provider_limits
from pipeline.llm.request import MAX_ERROR_CHARS as MAX_ERROR_CHARS
from pipeline.llm.request import CallRecord as CallRecord
from pipeline.llm.request import CallSink as CallSink
from pipeline.llm.request import Completion as Completion
from pipeline.llm.request import LLMRequest, cached_tokens_of
from pipeline.llm.retry_policy import CALL_ATTEMPTS as CALL_ATTEMPTS
from pipeline.llm.retry_policy import NO_CAPACITY, RetryPolicy, flex_gives_way, kind_of, retry_wait_s
from pipeline.llm.retry_policy import RATE_LIMITED_ATTEMPTS as RATE_LIMITED_ATTEMPTS
from pipeline.llm.structured import ModeStore
from pipeline.llm.tokens import estimate_prompt, reserving_for

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


FLEX_TIMEOUT_S = 900.0
"""A flex call's HTTP timeout, at least: OpenAI's flex guide advises 15 minutes."""


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
        self._pacing = Pacing(limiter, settings, self._rng)
        self._retry = RetryPolicy(limiter_paces=limiter is not None)
        self._modes = ModeStore(settings.llm_structured_output, limiter.client if limiter else None)
        self._answers = StructuredAnswers(self._complete, self._modes, self.endpoint)
        self.cache_keys = CacheKeys(self.endpoint, limiter.client if limiter else None)
        """Whether the endpoint takes `prompt_cache_key` (sent until it refuses it)."""
        self.spend = SpendMeter(limiter.client if limiter else None)
        """Capped runs' spend in Redis: each call of a `spending` sink holds its cost there."""
        if breaker is None and limiter is not None:
            breaker = circuit.Circuit.from_settings(settings, limiter.client, self.endpoint)
        self.circuit = breaker
        """The endpoint's circuit breaker, on the limiter's Redis (None without Redis)."""
        self._keys = settings.api_keys()
        self._extract_models = settings.extract_models()
        self._prices = settings.prices()
        self._flex_prices = settings.batch_prices()
        """Flex processing is priced at Batch API rates (OpenAI's flex guide)."""
        self._circuit_pass = CircuitPass(breaker, settings, self.endpoint, self._prices)
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

    def spending(self, run_id: str, sink: CallSink, recorded: Recorded) -> CallSink:
        """`sink`, for a capped run's calls: each HTTP attempt holds its largest cost against the
        run's budget before it is sent (refused with BudgetSpent when it does not fit), and the
        hold becomes what it cost when it comes back (`pipeline.llm.spending`). `recorded`: the
        run's budget and recorded cost, from which the count in Redis is opened."""
        return spending.Spending(self.spend, run_id, sink, recorded)

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
        lazily imported resources and lazily built types, gone through offline: `warm`; each
        model's token counter), so that the first call of a run does not wait for them."""
        for model in {
            *self.extract_model_names(),
            self.pick_model("compress"),
            self.pick_model("synthesize"),
        }:
            reserving_for(model)
        for client in self._clients:
            _ = client.chat.completions.with_raw_response
        asked = self.structured_request(warm.MESSAGES, warm.Answer, model=self.model, max_tokens=16)
        warm.dry_run(warm.bodies(asked.body()))

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
        """A plain-text answer (at the standard tier: the report's calls)."""
        request = LLMRequest(messages, stage, model or self.model, max_tokens, sink)
        done = self._complete(request)
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
        service_tier: str | None = None,
        standard_from: float | None = None,
        on_logprobs: Callable[[str, list[tuple[str, float]]], None] | None = None,
        temperature: float = 0.0,
        cache_key: str | None = None,
    ) -> M:
        """An answer validated against `schema`, repaired once with the validation error;
        `service_tier="flex"` asks at flex processing's tier (a flex run's extractions), until
        `standard_from` (epoch seconds), when the deadline needs the standard tier. With
        `on_logprobs`, token log-probabilities are asked for and each answer's go there;
        `cache_key` is sent as `prompt_cache_key` where the endpoint takes it.

        Raises SchemaViolation when the repaired answer does not validate either.
        """
        request = LLMRequest(
            messages,
            stage,
            model or self.model,
            max_tokens,
            sink,
            schema,
            service_tier=service_tier,
            standard_from=standard_from,
            on_logprobs=on_logprobs,
            temperature=temperature,
            cache_key=cache_key,
        )
        return cast(M, self._answers.ask(request))

    def structured_request(
        self,
        messages: list[prompts.Message],
        schema: type[BaseModel],
        *,
        model: str,
        max_tokens: int,
        sink: CallSink = lambda record: None,
        stage: str = "extract",
        cache_key: str | None = None,
    ) -> LLMRequest:
        """The request for `schema`'s JSON in the structured-output mode the endpoint takes, as
        the synchronous call would ask (a Batch API line's request: `body()` is its body)."""
        request = LLMRequest(messages, stage, model, max_tokens, sink, schema, cache_key=cache_key)
        return self.cache_keys.fit(self._answers.in_current_mode(request))

    def finish_structured(self, done: Completion, asked: LLMRequest) -> BaseModel:
        """The answer `done` to `asked`, validated; repaired once, and the rest of a cut-off
        answer asked for, with calls made now (also for a Batch API line's answer)."""
        return self._answers.finish(done, asked)

    def batch_body(
        self,
        messages: list[prompts.Message],
        schema: type[BaseModel],
        model: str,
        max_tokens: int,
        cache_key: str | None = None,
    ) -> tuple[dict[str, Any], list[prompts.Message]]:
        """The body a Batch API line sends for a structured answer, in the structured-output
        mode the endpoint takes (as the synchronous call would ask), and its messages."""
        request = self.structured_request(
            messages, schema, model=model, max_tokens=max_tokens, cache_key=cache_key
        )
        return request.body(), request.messages

    def _calibrated(self, model: str, estimate: int) -> int:
        """The prompt estimate as a call reserves it now (scaled by what the provider counted)."""
        return self._pacing.tokens(model, estimate, 0)

    def _complete(self, request: LLMRequest) -> Completion:
        """One answer, retrying transient failures here; every HTTP attempt is recorded."""
        estimate = estimate_prompt(request.model, request.messages)
        tokens = self._pacing.tokens(request.model, estimate, request.max_tokens)
        scopes = [Scope(self.endpoint, request.model, slot) for slot in range(len(self._clients))]
        failed: dict[str, int] = {}
        """Failed tries of the call per retry kind (rate_limited, unavailable)."""
        waited_s = 0.0
        while True:
            if request.service_tier == "flex" and self._flex_gives_way(request):
                request = request.at_standard_tier()  # only the standard tier still makes the deadline
            gate = self._circuit_pass.enter(request)
            try:
                permit = self._pacing.acquire(scopes, tokens, waited_s)
            except BaseException:
                self._circuit_pass.report(gate, "abandoned")  # a probe that never went: the next call's turn
                raise
            # PIPELINE_LIMITER_MAX_WAIT_S bounds the call's waits in place, over all its attempts;
            # each attempt's record carries its own.
            permit = replace(permit, waited_s=permit.waited_s - waited_s)
            waited_s += permit.waited_s
            try:
                done = self._send(permit, request)
            except Failure as failure:
                error = failure.error
                told = self._circuit_pass.report(gate, failure.outcome, str(error), request.fingerprint())
                if isinstance(error, errors.RateLimited):
                    self._pacing.pause(permit.scope, error)  # first, before the record
                request.sink(failure.record)
            except BaseException:
                self._circuit_pass.report(gate, "abandoned")
                raise
            else:
                self._circuit_pass.report(gate, "answered")
                self._pacing.calibrate(request.model, estimate, done.record.prompt_tokens)
                return done
            if told.held:
                continue  # the circuit is open: the next try waits for its probe, no failure counted
            kind = kind_of(error)
            failed[kind] = max(failed.get(kind, 0) + 1, told.own_failures)
            retry_after_s = error.retry_after_s if isinstance(error, errors.RetryableError) else None
            wait_s = retry_wait_s(kind, failed[kind], retry_after_s, self._retry, self._rng)
            if wait_s is None:
                raise error
            if kind == NO_CAPACITY and self._flex_gives_way(request, wait_s):
                request = request.at_standard_tier()  # waiting for flex would cost the deadline
                continue
            if wait_s > 0:
                time.sleep(wait_s)

    def _flex_gives_way(self, request: LLMRequest, wait_s: float = 0.0) -> bool:
        """`flex_gives_way` on the one clock (Redis TIME): a worker whose host runs minutes ahead
        must not go at the standard tier early, nor one behind stay at flex past the moment."""
        if request.standard_from is None:
            return False
        return flex_gives_way(request.standard_from, self._pacing.now_s(), wait_s)

    def _send(self, permit: Permit, request: LLMRequest) -> Completion:
        """One HTTP attempt, as a span of the document's trace (`pipeline.core.tracing`): its
        stage, model, status, tokens and latency; never the prompt or the answer. A capped run's
        attempt holds its largest cost against the budget first (`pipeline.llm.spending`)."""
        flex = request.service_tier == "flex"
        prices, life_s = (self._flex_prices, FLEX_TIMEOUT_S) if flex else (self._prices, 0.0)
        life_s = 2 * max(life_s, self.settings.llm_timeout_s)  # _post may call twice
        refused = partial(self._pacing.release, permit, None, 0)  # the permit handed back unused
        with (
            spending.holding(request, permit.tokens, prices, life_s, refused) as came_back,
            tracing.span("llm.call", {"llm.stage": request.stage, "llm.model": request.model}) as current,
        ):
            try:
                done = self._attempt(permit, request)
            except Failure as failure:
                came_back(failure.record)
                _trace_record(current, failure.record)
                raise
            came_back(done.record)
            _trace_record(current, done.record)
            return done

    def _attempt(self, permit: Permit, request: LLMRequest) -> Completion:
        """Send once; the answer, or Failure with the mapped error and the attempt's record."""
        self._go_ahead(permit)
        record = CallRecord(
            request.stage,
            request.model,
            "ok",
            key_slot=permit.scope.key_slot,
            limiter_wait_ms=int(permit.waited_s * 1000),
            mode="flex" if request.service_tier == "flex" else "sync",
        )
        started = time.monotonic()
        try:
            limits, response = self._post(permit, request)
        except openai.APIError as exc:
            raise self._failure(exc, permit, record, started) from None
        return self._answered(response, limits, permit, request, record, started)

    def _post(self, permit: Permit, request: LLMRequest) -> tuple[ProviderLimits, ChatCompletion]:
        """The HTTP call: the provider's rate-limit headers and the parsed answer."""
        # Within its HTTP timeout, the call keeps the lease it works under (progress).
        timeout_s = self.settings.llm_timeout_s
        if request.service_tier == "flex":
            timeout_s = max(timeout_s, FLEX_TIMEOUT_S)
        create = self._clients[permit.scope.key_slot].chat.completions.with_raw_response.create
        asked = self.cache_keys.fit(request)
        with progress.blocking(timeout_s):
            try:
                raw = create(**asked.body(), timeout=timeout_s)
            except openai.APIStatusError as exc:
                # An endpoint that refuses prompt_cache_key: asked again at once without it.
                if not asked.cache_key or not self.cache_keys.refuses(exc):
                    raise
                raw = create(**replace(asked, cache_key=None).body(), timeout=timeout_s)
        return provider_limits(raw.headers), raw.parse()

    def _failure(self, exc: openai.APIError, permit: Permit, record: CallRecord, started: float) -> Failure:
        """A failed attempt: its error mapped, the limiter released, its record (nothing billed)."""
        limits = provider_limits(exc.response.headers) if isinstance(exc, openai.APIStatusError) else None
        error = map_error(exc, limits, self.settings)
        # A refused call was not charged tokens (a provider that counts them says so in its
        # headers, and the limiter then follows them); a call that failed otherwise may
        # have been, so its reservation stays.
        refused = isinstance(error, (errors.RateLimited, errors.CapacityUnavailable))
        self._pacing.release(permit, limits, 0 if refused else None)
        failed = replace(
            record,
            status=STATUS_OF[type(error)],
            latency_ms=_since_ms(started),
            error=str(error),
            cost_usd=call_cost(self._prices, record.model, 0, 0),  # no answer, no usage: nothing billed
        )
        return Failure(error, failed, circuit_outcome(exc, error))

    def _answered(
        self,
        response: ChatCompletion,
        limits: ProviderLimits,
        permit: Permit,
        request: LLMRequest,
        record: CallRecord,
        started: float,
    ) -> Completion:
        """An answered attempt: the limiter released with what the quota was charged, its usage,
        latency and cost recorded."""
        choice = response.choices[0]
        usage = response.usage
        prices = self._flex_prices if request.service_tier == "flex" else self._prices
        prompt_tokens = usage.prompt_tokens if usage else 0
        completion_tokens = usage.completion_tokens if usage else 0
        cached_tokens = cached_tokens_of(usage.model_dump() if usage else None)
        # The quota was charged the prompt and max_tokens, whatever the answer used.
        self._pacing.release(permit, limits, usage.prompt_tokens + request.max_tokens if usage else None)
        tokens = choice.logprobs.content if choice.logprobs is not None else None
        if request.on_logprobs is not None and tokens:
            request.on_logprobs(choice.message.content or "", [(t.token, t.logprob) for t in tokens])
        return Completion(
            content=choice.message.content or "",
            finish_reason=choice.finish_reason or "stop",
            record=replace(
                record,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cached_tokens=cached_tokens,
                latency_ms=_since_ms(started),
                cost_usd=call_cost(prices, record.model, prompt_tokens, completion_tokens, cached_tokens),
                sync_cost_usd=call_cost(
                    self._prices, record.model, prompt_tokens, completion_tokens, cached_tokens
                ),
            ),
        )

    def _go_ahead(self, permit: Permit) -> None:
        """Right before the request goes out, once admitted: a cancelled run's call is not sent
        (`pipeline.llm.stops`), and its permit is handed back unused."""
        try:
            stops.before_call()
        except BaseException:
            self._pacing.release(permit, None, 0)
            raise


def _since_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


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
