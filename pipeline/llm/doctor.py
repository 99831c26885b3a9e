"""`pipeline doctor`: what the configured endpoint takes, found by asking it a few small things.

Calls go straight to the endpoint (not through the limiter): a handful of one-line requests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
from pydantic import BaseModel, ValidationError

from pipeline.core.settings import Settings
from pipeline.llm import prompts
from pipeline.llm.client import redact
from pipeline.llm.ratelimit.policy import ProviderLimits, provider_limits

CONTEXT_FIELDS = ("context_window", "context_length", "max_model_len", "max_context_length")
"""Where servers state a model's context window in /v1/models (vLLM: max_model_len)."""


class Probe(BaseModel):
    """The answer each structured-output probe asks for."""

    ok: bool


@dataclass(frozen=True)
class ModeResult:
    mode: str
    works: bool
    detail: str
    latency_s: float | None = None


@dataclass
class Diagnosis:
    endpoint: str
    model: str
    models: list[str] | None = None
    """What /v1/models lists (None: it did not answer)."""
    models_problem: str | None = None
    context_window: int | None = None
    modes: list[ModeResult] = field(default_factory=list)
    limits: ProviderLimits | None = None
    """The x-ratelimit-* headers of the last answer (None: no answer came back)."""
    batch: str = "not tried"

    @property
    def working_mode(self) -> str | None:
        """The mode `auto` would settle on: the first that works."""
        return next((m.mode for m in self.modes if m.works), None)

    @property
    def headers_sent(self) -> bool:
        return self.limits is not None and any(v is not None for v in vars(self.limits).values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "model": self.model,
            "models": self.models,
            "models_problem": self.models_problem,
            "context_window": self.context_window,
            "modes": [vars(m) for m in self.modes],
            "working_mode": self.working_mode,
            "rate_limit_headers": vars(self.limits) if self.headers_sent and self.limits else None,
            "batch_api": self.batch,
        }


def diagnose(settings: Settings) -> Diagnosis:
    """Ask the endpoint of `settings` for its models, a one-line answer in each structured-output
    mode, its rate-limit headers and whether its Batch API answers."""
    keys = settings.api_keys()
    found = Diagnosis(str(settings.llm_base_url), settings.llm_model)
    with httpx.Client(timeout=settings.llm_timeout_s) as http:
        client = openai.OpenAI(
            base_url=settings.llm_base_url,
            api_key=keys[0],
            max_retries=0,
            timeout=settings.llm_timeout_s,
            http_client=http,
        )
        _models(client, found, keys)
        for mode in prompts.STRUCTURED_MODES:
            found.modes.append(_try_mode(client, found, mode, keys))
        try:
            client.batches.list(limit=1)
            found.batch = "answers"
        except openai.APIStatusError as exc:
            found.batch = f"no (HTTP {exc.status_code})"
        except openai.APIError as exc:
            found.batch = f"no ({type(exc).__name__})"
    return found


def _models(client: openai.OpenAI, found: Diagnosis, keys: list[str]) -> None:
    try:
        listed = list(client.models.list())
    except openai.APIError as exc:
        found.models_problem = redact(f"{type(exc).__name__}: {exc}", *keys)
        return
    found.models = [m.id for m in listed]
    for entry in listed:
        if entry.id == found.model:
            extra = entry.model_extra or {}
            for name in CONTEXT_FIELDS:
                if isinstance(extra.get(name), int):
                    found.context_window = extra[name]


def _try_mode(client: openai.OpenAI, found: Diagnosis, mode: str, keys: list[str]) -> ModeResult:
    messages: list[prompts.Message] = [
        {"role": "system", "content": "You answer with JSON only."},
        {"role": "user", "content": 'Answer with the JSON object {"ok": true}.'},
    ]
    messages, fmt = prompts.structured_request(messages, Probe, mode)
    kwargs: dict[str, Any] = {"response_format": fmt} if fmt else {}
    started = time.monotonic()
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=found.model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=50,
            temperature=0,
            **kwargs,
        )
        found.limits = provider_limits(raw.headers)
        answer = raw.parse().choices[0].message.content or ""
    except openai.APIStatusError as exc:
        found.limits = provider_limits(exc.response.headers)
        said = exc.body.get("message") if isinstance(exc.body, dict) else None
        return ModeResult(mode, False, redact(f"HTTP {exc.status_code}: {said or exc.message}", *keys))
    except openai.APIError as exc:
        return ModeResult(mode, False, redact(f"{type(exc).__name__}: {exc}", *keys))
    latency = round(time.monotonic() - started, 3)
    try:
        Probe.model_validate_json(answer)
    except ValidationError:
        return ModeResult(mode, False, f"answered, but not the JSON asked for: {answer[:80]!r}", latency)
    return ModeResult(mode, True, "works", latency)
