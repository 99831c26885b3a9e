"""What goes through the call path: one request in, one completion (and its records) out.

`LLMRequest` is built once at the client's edge (`LLMClient.text`, `structured`) and handed
down whole; a repair or a request for the rest of a cut-off answer is the same request with
other messages and another stage (`LLMRequest.asking`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import BaseModel

from pipeline.llm import prompts

MAX_ERROR_CHARS = 500
"""The longest error text a call's record keeps."""


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
    """sync: asked over HTTP now; flex: the same at flex processing's tier (batch prices);
    batch: a line of a Batch API output file."""
    sync_cost_usd: float | None = None
    """What the same tokens cost at the standard tier (a flex call's); None: `cost_usd`."""
    cached_tokens: int = 0
    """Of `prompt_tokens`, those the provider served from its prompt cache (priced as cached)."""


CallSink = Callable[[CallRecord], None]


def cached_tokens_of(usage: Any) -> int:
    """The cached prompt tokens an answer's `usage` reports: `prompt_tokens_details.cached_tokens`
    (Chat Completions, also in a Batch API output line's body) or `input_tokens_details.cached_tokens`
    (the Responses API's and a Batch object's names); 0 when it reports none. Never more than
    the prompt, never negative, whatever an endpoint writes."""
    if not isinstance(usage, dict):
        return 0
    for details, prompt in (
        ("prompt_tokens_details", "prompt_tokens"),
        ("input_tokens_details", "input_tokens"),
    ):
        found = usage.get(details)
        cached = found.get("cached_tokens") if isinstance(found, dict) else None
        if isinstance(cached, int) and not isinstance(cached, bool) and cached > 0:
            total = usage.get(prompt)
            return min(cached, total) if isinstance(total, int) and total >= 0 else cached
    return 0


@dataclass(frozen=True)
class Completion:
    content: str
    finish_reason: str
    record: CallRecord


@dataclass(frozen=True)
class LLMRequest:
    """One request to the model and where its calls are recorded.

    `schema` is the pydantic model a structured answer validates against (None: plain text);
    `response_format` the argument sent for it in the negotiated structured-output mode (None:
    no argument, the schema, if any, is in the prompt)."""

    messages: list[prompts.Message]
    stage: str
    model: str
    max_tokens: int
    sink: CallSink
    schema: type[BaseModel] | None = None
    response_format: dict[str, Any] | None = None
    service_tier: str | None = None
    """"flex": asked at flex processing's tier (slower, at batch prices); None: the standard tier."""
    standard_from: float | None = None
    """A flex request's last moment at flex (epoch seconds: the planner's `runs.standard_from`):
    from then on, or when waiting out a refusal would pass it, it goes at the standard tier."""
    on_logprobs: Callable[[str, list[tuple[str, float]]], None] | None = None
    """Asks for token log-probabilities; each answered completion's content and tokens go here."""
    temperature: float = 0.0
    """0: the most likely answer; above, a sample (a verification's second answer by the same model)."""
    cache_key: str | None = None
    """Sent as `prompt_cache_key` (a filing's requests share one: a provider routes them to one
    prompt cache); dropped for an endpoint that refuses it (`pipeline.llm.cache_keys`)."""

    def asking(self, messages: list[prompts.Message], stage: str | None = None) -> LLMRequest:
        """The same request with other messages (a repair, the rest of a cut-off answer)."""
        return replace(self, messages=messages, stage=stage or self.stage)

    def at_standard_tier(self) -> LLMRequest:
        """The same request at the standard tier (flex could not answer it in time)."""
        return replace(self, service_tier=None, standard_from=None)

    def fingerprint(self) -> str:
        """What the request sends, hashed: the same for its retries and a redelivered task's, so
        that the circuit tells one bad request from an outage."""
        body = json.dumps(self.body(), sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def body(self) -> dict[str, Any]:
        """The chat-completion body this request sends (also a Batch API line's body)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.messages,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }
        if self.response_format:
            body["response_format"] = self.response_format
        if self.service_tier:
            body["service_tier"] = self.service_tier
        if self.cache_key:
            body["prompt_cache_key"] = self.cache_key
        if self.on_logprobs is not None:
            # top_logprobs 0: the chosen tokens' own only; llama-cpp-python returns none without it.
            body.update(logprobs=True, top_logprobs=0)
        return body
