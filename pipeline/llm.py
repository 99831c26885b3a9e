"""The LLM client: one OpenAI SDK client per process, errors mapped at this one boundary.

The SDK's own retries are off (`max_retries=0`): the task layer is the only one that
retries, so a call is never multiplied by two retry loops.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import openai
from pydantic import BaseModel, ValidationError

from pipeline import errors, prompts
from pipeline.settings import Settings

M = TypeVar("M", bound=BaseModel)
_SECRET_PATTERN = re.compile(r"sk-[A-Za-z0-9_\-*.]{3,}")
MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class CallRecord:
    """One HTTP call to the model, as stored in `llm_calls`."""

    stage: str
    model: str
    status: str  # ok | invalid | rate_limited | unavailable | rejected
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: int = 0
    error: str | None = None


CallSink = Callable[[CallRecord], None]


@dataclass(frozen=True)
class Completion:
    content: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """How long the provider asked us to wait, from `retry-after-ms` or `retry-after`."""
    if value := headers.get("retry-after-ms"):
        try:
            return float(value) / 1000
        except ValueError:
            pass
    if value := headers.get("retry-after"):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def redact(text: str, secret: str | None) -> str:
    """`text` with the API key, and anything shaped like one, removed; cut to a sane length."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, "[redacted]")
    return _SECRET_PATTERN.sub("[redacted]", text)[:MAX_ERROR_CHARS]


class LLMClient:
    """Chat completions against one OpenAI-compatible endpoint and model."""

    def __init__(self, base_url: str, api_key: str, model: str, timeout_s: float, pool_size: int) -> None:
        self.model = model
        self._api_key = api_key
        limits = httpx.Limits(max_connections=pool_size, max_keepalive_connections=pool_size)
        self._http = httpx.Client(limits=limits, timeout=timeout_s)
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=0,
            timeout=timeout_s,
            http_client=self._http,
        )

    @classmethod
    def from_settings(cls, settings: Settings, pool_size: int | None = None) -> LLMClient:
        if not settings.llm_base_url:
            raise errors.ConfigError(
                "no LLM endpoint: set PIPELINE_LLM_BASE_URL (or OPENAI_BASE_URL), "
                "or use `pipeline run`, which starts the simulator"
            )
        return cls(
            base_url=settings.llm_base_url,
            api_key=settings.api_key_value(),
            model=settings.llm_model,
            timeout_s=settings.llm_timeout_s,
            pool_size=pool_size or settings.worker_concurrency,
        )

    def close(self) -> None:
        self._http.close()

    def text(self, messages: list[prompts.Message], *, stage: str, max_tokens: int, sink: CallSink) -> str:
        """A plain-text answer."""
        done = self._complete(messages, stage=stage, max_tokens=max_tokens, sink=sink)
        sink(self._record(stage, "ok", done))
        return done.content.strip()

    def structured(
        self,
        messages: list[prompts.Message],
        schema: type[M],
        *,
        stage: str,
        max_tokens: int,
        sink: CallSink,
    ) -> M:
        """An answer validated against `schema`, repaired once with the validation error.

        Raises SchemaViolation when the repaired answer does not validate either.
        """
        fmt = _response_format(schema)
        done = self._complete(messages, stage=stage, max_tokens=max_tokens, sink=sink, fmt=fmt)
        try:
            parsed = schema.model_validate_json(done.content)
        except ValidationError as exc:
            problem = _describe(exc, done.finish_reason)
            sink(self._record(stage, "invalid", done, problem))
        else:
            sink(self._record(stage, "ok", done))
            return parsed
        retry = prompts.repair_messages(messages, done.content, problem)
        done = self._complete(retry, stage="repair", max_tokens=max_tokens, sink=sink, fmt=fmt)
        try:
            parsed = schema.model_validate_json(done.content)
        except ValidationError as exc:
            problem = _describe(exc, done.finish_reason)
            sink(self._record("repair", "invalid", done, problem))
            raise errors.SchemaViolation(f"answer did not validate after repair: {problem}") from None
        sink(self._record("repair", "ok", done))
        return parsed

    def _complete(
        self,
        messages: list[prompts.Message],
        *,
        stage: str,
        max_tokens: int,
        sink: CallSink,
        fmt: dict[str, Any] | None = None,
    ) -> Completion:
        started = time.monotonic()
        kwargs: dict[str, Any] = {"response_format": fmt} if fmt else {}
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=messages,  # type: ignore[arg-type]
                max_tokens=max_tokens,
                temperature=0,
                **kwargs,
            )
        except openai.APIError as exc:
            mapped = self._map_error(exc)
            latency_ms = int((time.monotonic() - started) * 1000)
            status = _STATUS_OF[type(mapped)]
            sink(CallRecord(stage, self.model, status, latency_ms=latency_ms, error=str(mapped)))
            raise mapped from None
        choice = response.choices[0]
        usage = response.usage
        return Completion(
            content=choice.message.content or "",
            finish_reason=choice.finish_reason or "stop",
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            latency_ms=int((time.monotonic() - started) * 1000),
        )

    def _record(self, stage: str, status: str, done: Completion, error: str | None = None) -> CallRecord:
        return CallRecord(
            stage,
            self.model,
            status,
            done.prompt_tokens,
            done.completion_tokens,
            done.latency_ms,
            error,
        )

    def _map_error(self, exc: openai.APIError) -> errors.PipelineError:
        message = redact(f"{type(exc).__name__}: {exc}", self._api_key)
        if isinstance(exc, openai.RateLimitError):
            return errors.RateLimited(message, retry_after_s(exc.response.headers))
        if isinstance(exc, openai.APIStatusError) and exc.status_code < 500:
            return errors.ProviderRejected(message)
        # 5xx, timeouts, dropped connections, and bodies that are not JSON at all.
        return errors.UpstreamUnavailable(message)


_STATUS_OF: dict[type[errors.PipelineError], str] = {
    errors.RateLimited: "rate_limited",
    errors.ProviderRejected: "rejected",
    errors.UpstreamUnavailable: "unavailable",
}


def _response_format(schema: type[BaseModel]) -> dict[str, Any]:
    from pipeline.schemas import response_format

    return response_format(schema)


def _describe(exc: ValidationError, finish_reason: str) -> str:
    lines = [f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors()[:8]]
    if finish_reason == "length":
        lines.insert(0, "the answer was cut off at max_tokens")
    return "; ".join(lines)[:MAX_ERROR_CHARS]
