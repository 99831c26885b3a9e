"""The aiohttp app: OpenAI-compatible chat completions with limits, latency and faults."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from pipeline_dev.sim import batches, faults, files, outage
from pipeline_dev.sim.config import SimConfig
from pipeline_dev.sim.errors import (
    asked_failure,
    echo_into,
    error_response,
    key_refusal,
    presented_key,
    request_refusal,
)
from pipeline_dev.sim.limits import Decision, openai_duration
from pipeline_dev.sim.request import SLOW_COPY_S, ChatRequest, Composed, RequestError, compose, finish, parse
from pipeline_dev.sim.state import STATE, Recorder, SimState

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 64 * 1024 * 1024  # whole filings arrive in one request
INLINE_CHARS = 20_000
MAX_CACHED_ANSWERS = 200_000  # bigger prompts are answered on a worker thread, off the event loop
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _echo_key(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With `echo_key`, every JSON error answered quotes the request's API key (`echoed`)."""
    response = await handler(request)
    if (
        not request.app[STATE].config.echo_key
        or response.status < 400
        or not isinstance(response, web.Response)
        or response.content_type != "application/json"
        or not isinstance(response.body, bytes)
    ):
        return response
    body = json.loads(response.body)
    key = presented_key(request.headers.get("Authorization", ""))
    kept = {k: v for k, v in response.headers.items() if k.lower() not in ("content-type", "content-length")}
    return web.json_response(echo_into(body, key), status=response.status, headers=kept)


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = "invalid_request_error" if exc.status < 500 else "server_error"
        return error_response(exc.status, f"{exc.reason}: {request.method} {request.path}", kind)
    except (asyncio.CancelledError, ConnectionError):
        raise
    except Exception as exc:  # a simulator bug must still answer like a provider
        log.exception("pipeline-sim failed on %s %s", request.method, request.path)
        return error_response(500, f"pipeline-sim internal error: {exc!r}", "server_error")


def _limit_headers(decision: Decision) -> dict[str, str]:
    headers: dict[str, str] = {}
    for kind, limit, remaining, reset in (
        ("requests", decision.limit_requests, decision.remaining_requests, decision.reset_requests_s),
        ("tokens", decision.limit_tokens, decision.remaining_tokens, decision.reset_tokens_s),
    ):
        if limit:  # no limit configured, nothing to report
            headers[f"x-ratelimit-limit-{kind}"] = str(limit)
            headers[f"x-ratelimit-remaining-{kind}"] = str(remaining)
            headers[f"x-ratelimit-reset-{kind}"] = openai_duration(reset)
    return headers


def _rate_limited(decision: Decision, model: str, tokens: int) -> web.Response:
    headers = _limit_headers(decision)
    headers["Retry-After"] = str(max(1, math.ceil(decision.retry_after_s)))
    headers["retry-after-ms"] = str(max(1, math.ceil(decision.retry_after_s * 1000)))
    wait = openai_duration(decision.retry_after_s)
    if decision.too_large:
        message = (
            f"Request too large for {model} on tokens per min (TPM): "
            f"Limit {decision.limit_tokens}, Requested {tokens}."
        )
    elif decision.per_second:
        message = (
            f"Rate limit reached for {model}: the per-minute quota is also enforced per second "
            f"(RPM {decision.limit_requests}, TPM {decision.limit_tokens}). Please try again in {wait}."
        )
    elif decision.limit_requests and decision.remaining_requests == 0:
        message = (
            f"Rate limit reached for {model} on requests per min (RPM): "
            f"Limit {decision.limit_requests}. Please try again in {wait}."
        )
    else:
        message = (
            f"Rate limit reached for {model} on tokens per min (TPM): Limit "
            f"{decision.limit_tokens}, Requested {tokens}. Please try again in {wait}."
        )
    return error_response(429, message, "requests", "rate_limit_exceeded", headers)


def _refused(chat: ChatRequest, authorization: str, config: SimConfig) -> web.Response | None:
    """A request the provider refuses whatever its load, in OpenAI's words, or None."""
    refusal = key_refusal(authorization, config) or request_refusal(chat, config)
    return None if refusal is None else refusal.response()


async def _abort(request: web.Request) -> web.StreamResponse:
    """Reset the connection without an HTTP answer."""
    if request.transport is not None:
        request.transport.abort()
    # Nothing can be written to an aborted transport; aiohttp drops this response quietly.
    return web.Response(status=500)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """POST /v1/chat/completions."""
    state = request.app[STATE]
    state.counters.requests_total += 1
    state.in_flight += 1
    state.most_in_flight = max(state.most_in_flight, state.in_flight)
    try:
        return await _chat(request, state)
    except asyncio.CancelledError:
        state.counters.cancelled += 1
        raise
    finally:
        state.in_flight -= 1


async def _chat(request: web.Request, state: SimState) -> web.StreamResponse:
    if (window := state.outages.refuse()) is not None:  # before anything: a down provider reads nothing
        state.counters.outage_refused += 1
        state.record(None, None, None, f"outage-{window.kind}")
        if window.kind == "reset":
            return await _abort(request)
        message = outage.MESSAGES[window.kind]
        return error_response(int(window.kind), message, "server_error")
    try:
        chat = parse(await _read_json(request))
    except RequestError as exc:
        state.counters.bad_request_400 += 1
        state.record(None, None, None, 400)
        return error_response(400, str(exc), "invalid_request_error")
    refused = _refused(chat, request.headers.get("Authorization", ""), state.config)
    if refused is not None:
        state.counters.bad_request_400 += 1
        state.record(chat.model, chat.messages, chat.format_type, refused.status)
        return refused
    state.models.add(chat.model)
    if chat.shape in state.config.rejected_shapes:
        if state.config.rejected_status >= 500:
            state.counters.errors_5xx += 1
        else:
            state.counters.bad_request_400 += 1
        state.record(chat.model, chat.messages, chat.format_type, state.config.rejected_status)
        message = f"response_format of this shape ({chat.shape}) is not supported by this server"
        return error_response(state.config.rejected_status, message, "invalid_request_error")
    loop = asyncio.get_running_loop()
    composed: Composed | None = None
    if chat.max_tokens is None:  # the token charge needs the answer's length
        composed = await _compose(chat, loop, state)
        charge = chat.prompt_tokens + composed.tokens
    else:
        charge = chat.prompt_tokens + chat.max_tokens
    if chat.service_tier == "flex" and (refused := _flex_refusal(state)) is not None:
        state.record(chat.model, chat.messages, chat.format_type, 429)
        return refused
    presented = presented_key(request.headers.get("Authorization", ""))
    if (asked := asked_failure(chat, presented, state.config)) is not None:  # [[sim:fail-NNN]]
        return asked.response()
    now = time.monotonic()
    decision = state.limiter.check(now, charge)
    if not decision.admitted:
        state.counters.rejected_429 += 1
        state.counters.rejected_per_second += decision.per_second
        state.refusals.append(now)
        state.record(chat.model, chat.messages, chat.format_type, 429)
        return _rate_limited(decision, chat.model, charge)
    state.admissions.append((now, charge))
    cached = state.serve_prompt(chat, now)  # the provider reads the prompt once it admits it
    draw = faults.draw(state.rng, state.config)
    outcome = "error" if "error" in chat.hooks else draw.outcome
    status = draw.error_status if "error" not in chat.hooks else 500
    state.record(chat.model, chat.messages, chat.format_type, _record_status(outcome, status))
    if outcome == "hang":
        state.counters.hung += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.shutdown.wait(), state.config.hang_s)
        return await _abort(request)
    if outcome == "ok" and composed is None:
        composed = await _compose(chat, loop, state)
    slower = state.config.flex_slowdown if chat.service_tier == "flex" else 1.0
    await asyncio.sleep(draw.latency_s * slower + _copy_delay_s(chat, state))
    if outcome == "drop":
        state.counters.dropped += 1
        return await _abort(request)
    headers = _limit_headers(decision)
    if outcome == "error" or composed is None:
        state.counters.errors_5xx += 1
        message = "The server had an error while processing your request. Sorry about that!"
        return error_response(status, message, "server_error", None, headers)
    body = finish(chat, composed, draw, _next_id(state), cached)
    counters = state.counters
    counters.admitted += 1
    counters.bad_json += body.bad_json
    counters.truncated += body.truncated
    counters.prompt_tokens += chat.prompt_tokens
    counters.cached_tokens += cached
    tier = "flex" if chat.service_tier == "flex" else "default"
    state.bill.add(chat.model, tier, chat.prompt_tokens, cached, body.completion_tokens)
    counters.completion_tokens += body.completion_tokens
    if not body.bad_json and not body.truncated:  # the quotes reached the client intact
        counters.quotes += composed.quotes
        counters.ungrounded_quotes += len(composed.invented)
        state.invented_quotes.extend(composed.invented)
    return web.json_response(body.payload, headers=headers)


FLEX_UNAVAILABLE = "Resource Unavailable: flex processing has no capacity for this request now. Please retry later, or without service_tier flex."
"""OpenAI's flex guide names the error "429 Resource Unavailable", not charged; its body's exact
words are not documented, so this says what the guide says."""


def _flex_refusal(state: SimState) -> web.Response | None:
    """A flex request refused for want of capacity (`flex_unavailable_rate`), before the quota
    sees it: nothing is charged. None when it is served."""
    state.counters.flex_requests += 1
    if state.flex_rng.random() >= state.config.flex_unavailable_rate:
        return None
    state.counters.flex_unavailable += 1
    return error_response(429, FLEX_UNAVAILABLE, "server_error", "resource_unavailable")


def _copy_delay_s(chat: ChatRequest, state: SimState) -> float:
    """SLOW_COPY_S for a `[[sim:slowcopy]]` request had before: of identical requests sent at
    once (hedged copies), the first to arrive answers first, the others a known while later."""
    if "slowcopy" not in chat.hooks:
        return 0.0
    key = hashlib.sha1(f"{chat.model}|{chat.prompt}".encode()).digest()
    if key in state.copies_seen:
        return SLOW_COPY_S
    state.copies_seen.add(key)
    return 0.0


def _record_status(outcome: str, status: int) -> int | str:
    statuses: dict[str, int | str] = {"ok": 200, "error": status, "drop": "dropped", "hang": "hung"}
    return statuses[outcome]


def _next_id(state: SimState) -> int:
    state.next_id += 1
    return state.next_id


async def _read_json(request: web.Request) -> Any:
    try:
        return json.loads(await request.read())
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"We could not parse the JSON body of your request: {exc}") from exc


async def _compose(chat: ChatRequest, loop: asyncio.AbstractEventLoop, state: SimState) -> Composed:
    """The answer, built from the request's document (CPU), or with --cache-answers the one
    built for the same request before (a second run of the same filings costs no CPU here)."""
    config = state.config
    key = b""
    if config.cache_answers:
        key = hashlib.sha1(f"{chat.model}|{chat.shape}|{chat.max_tokens}|{chat.prompt}".encode()).digest()
        if (found := state.answers.get(key)) is not None:
            return found
    ungrounded, misread, made_up = config.adversarial(chat.model)
    # At temperature 0 a model repeats itself; above, its errors are a sample: drawn afresh.
    seed = config.seed if not chat.temperature else random.randrange(2**31)
    if len(chat.prompt) <= INLINE_CHARS:
        composed = compose(chat, ungrounded, seed, misread, made_up)
    else:
        composed = await loop.run_in_executor(None, compose, chat, ungrounded, seed, misread, made_up)
    if key and len(state.answers) < MAX_CACHED_ANSWERS:
        state.answers[key] = composed
    return composed


async def models(request: web.Request) -> web.Response:
    """GET /v1/models: the served models when they are configured, else "sim-1", the pipeline's
    default model and every model name seen. A wrong key is refused here too (401), as OpenAI does on every endpoint."""
    state = request.app[STATE]
    refusal = key_refusal(request.headers.get("Authorization", ""), state.config)
    if refusal is not None:
        return refusal.response()
    names = sorted(state.config.served_models or state.models)
    data = [{"id": n, "object": "model", "created": 0, "owned_by": "pipeline-sim"} for n in names]
    return web.json_response({"object": "list", "data": data})


async def stats(request: web.Request) -> web.Response:
    """GET /sim/stats."""
    return web.json_response(request.app[STATE].stats())


async def bill(request: web.Request) -> web.Response:
    """GET /sim/bill: the usage of every answer served (chat completions, batch output lines) by
    model and tier, priced with the configured prices (`pipeline_dev.sim.bill`)."""
    return web.json_response(request.app[STATE].invoice())


async def invented(request: web.Request) -> web.Response:
    """GET /sim/invented: every quote the simulator replaced by text not in its document."""
    return web.json_response({"quotes": request.app[STATE].invented_quotes})


async def reset(request: web.Request) -> web.Response:
    """POST /sim/reset: zero the counters and the provider window."""
    request.app[STATE].reset()
    return web.json_response(request.app[STATE].stats())


def _boolean(value: object) -> bool:
    """A JSON true or false, nothing else (bool("false") would be True)."""
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _model_names(value: object) -> tuple[str, ...]:
    """A JSON list of model names."""
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValueError(f"expected a list of model names, got {value!r}")
    return tuple(value)


CONFIGURABLE: dict[str, Callable[[Any], Any]] = {
    "p50_s": float,
    "p95_s": float,
    "ungrounded_rate": float,
    "wrong_figure_rate": float,
    "made_up_rate": float,
    "faithful_models": _model_names,
    "batch_duration_s": float,
    "batch_validate_s": float,
    "batch_fail_rate": float,
    "batch_expire_after_s": float,
    "batch_enqueued_tokens": int,
    "flex_slowdown": float,
    "flex_unavailable_rate": float,
    "api_key": str,
    "echo_key": _boolean,
    "prompt_cache_ttl_s": float,
    "reject_prompt_cache_key": _boolean,
    "prices": str,
}
"""What POST /sim/config may change while the simulator runs: a request takes the knobs in force
when it arrives (its latency among them), a batch those at its creation. `api_key`: from now on
only this key is taken (a key revoked, then put back); `echo_key`: errors quote the request's key
from now on (true or false); `reject_prompt_cache_key`: a request with `prompt_cache_key` is
refused with 400 from now on (true) or accepted again (false); `prices`: what GET /sim/bill
prices the usage with."""


async def configure(request: web.Request) -> web.Response:
    """POST /sim/config {"ungrounded_rate": x, "batch_duration_s": s, ...}: knobs from now on, so
    that one simulator serves runs that need different ones (set, run, set back)."""
    state = request.app[STATE]
    try:
        body = await _read_json(request)
        if not isinstance(body, dict) or not body or not set(body) <= set(CONFIGURABLE):
            raise RequestError(f"expected an object of some of {sorted(CONFIGURABLE)}")
        values = {name: CONFIGURABLE[name](value) for name, value in body.items()}
        state.config = dataclasses.replace(state.config, **values)
    except (RequestError, ValueError, TypeError) as exc:
        return error_response(400, str(exc), "invalid_request_error")
    return web.json_response(state.stats())


async def start_outage(request: web.Request) -> web.Response:
    """POST /sim/outage {"seconds": N, "kind": "503" | "500" | "reset"}: from now on, every chat
    completion is refused for N seconds (0 ends the current outage). Answers GET /sim/stats's
    "outage"."""
    state = request.app[STATE]
    try:
        body = await _read_json(request)
        if not isinstance(body, dict) or "seconds" not in body:
            raise RequestError('expected {"seconds": N, "kind": "503" | "500" | "reset"}')
        state.outages.start(float(body["seconds"]), outage.kind_of(str(body.get("kind", "503"))))
    except (RequestError, ValueError, TypeError) as exc:
        return error_response(400, str(exc), "invalid_request_error")
    return web.json_response(state.outages.stats())


async def queue_batch_api_errors(request: web.Request) -> web.Response:
    """POST /sim/batch-api-errors {"statuses": [503, 401, ...]}: the next requests to the Files and
    Batches API are answered, one each in this order, with OpenAI's documented error of these
    statuses (BATCH_API_STATUSES); then as usual. Answers the statuses still queued."""
    state = request.app[STATE]
    try:
        body = await _read_json(request)
        statuses = body.get("statuses") if isinstance(body, dict) else None
        if not isinstance(statuses, list) or not set(statuses) <= set(files.BATCH_API_STATUSES):
            raise RequestError(f'expected {{"statuses": [...]}} of some of {list(files.BATCH_API_STATUSES)}')
        state.batch_api_errors.extend(statuses)
    except RequestError as exc:
        return error_response(400, str(exc), "invalid_request_error")
    return web.json_response({"statuses": list(state.batch_api_errors)})


def build_app(config: SimConfig) -> web.Application:
    """The simulator as an aiohttp application (state in `app[STATE]`)."""
    app = web.Application(middlewares=[_echo_key, _json_errors], client_max_size=MAX_BODY_BYTES)
    state = SimState(config)
    app[STATE] = state
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/sim/stats", stats)
    app.router.add_get("/sim/invented", invented)
    app.router.add_get("/sim/bill", bill)
    app.router.add_post("/sim/reset", reset)
    app.router.add_post("/sim/config", configure)
    app.router.add_post("/sim/outage", start_outage)
    app.router.add_post("/sim/batch-api-errors", queue_batch_api_errors)
    batches.setup(app, state, files.setup(app))

    async def recorder(_: web.Application) -> AsyncIterator[None]:
        state.recorder = Recorder(config.record_path) if config.record_path else None
        yield
        if state.recorder is not None:
            await asyncio.get_running_loop().run_in_executor(None, state.recorder.close)
            state.recorder = None

    async def release_hangs(_: web.Application) -> None:
        # Hung requests wait on this, so shutdown does not wait hang_s for them.
        state.shutdown.set()

    app.cleanup_ctx.append(recorder)
    app.on_shutdown.append(release_hangs)
    return app
