"""The SDK's errors mapped to the pipeline's, at this one boundary.

    openai.RateLimitError, code resource_unavailable -> CapacityUnavailable (flex had no room)
    openai.RateLimitError (429)                     -> RateLimited (retry_after_s from headers)
    openai.APIStatusError naming response_format    -> FormatRejected (the mode steps down)
    openai.APIStatusError, other 4xx                -> ProviderRejected (retrying will not help)
    5xx, timeouts, dropped connections, non-JSON    -> UpstreamUnavailable (retried)

A failed HTTP attempt travels up the client as `Failure`: the mapped error, the attempt's
record and what it tells the circuit breaker.
"""

from __future__ import annotations

import openai

from pipeline.core import errors
from pipeline.core.redaction import redact
from pipeline.core.settings import Settings
from pipeline.llm.ratelimit.policy import ProviderLimits, provider_wait_s
from pipeline.llm.request import MAX_ERROR_CHARS, CallRecord

STATUS_OF: dict[type[errors.PipelineError], str] = {
    errors.RateLimited: "rate_limited",
    errors.CapacityUnavailable: "no_capacity",
    errors.ProviderRejected: "rejected",
    errors.FormatRejected: "rejected",
    errors.UpstreamUnavailable: "unavailable",
}
"""The `llm_calls.status` of an attempt that failed with each mapped error."""


class Failure(Exception):
    """A failed HTTP attempt: the mapped error, the record of the attempt, and what it tells the
    circuit breaker (failed, answered or abandoned)."""

    def __init__(self, error: errors.PipelineError, record: CallRecord, outcome: str) -> None:
        super().__init__(str(error))
        self.error = error
        self.record = record
        self.outcome = outcome


def map_error(
    exc: openai.APIError, limits: ProviderLimits | None, settings: Settings
) -> errors.PipelineError:
    """The pipeline's error for the SDK's `exc`; `limits`: what its headers said, if any."""
    # Redacted before it is cut: a key cut in two would no longer be found.
    message = redact(f"{type(exc).__name__}: {exc}", settings)[:MAX_ERROR_CHARS]
    if isinstance(exc, openai.RateLimitError) and exc.code == "resource_unavailable":
        return errors.CapacityUnavailable(message, provider_wait_s(exc.response.headers))
    if isinstance(exc, openai.RateLimitError):
        spent = limits.spent if limits is not None else True
        return errors.RateLimited(message, provider_wait_s(exc.response.headers), quota_spent=spent)
    if isinstance(exc, openai.APIStatusError) and names_the_format(exc.status_code, _body(exc)):
        return errors.FormatRejected(message)
    if isinstance(exc, openai.APIStatusError) and exc.status_code < 500:
        return errors.ProviderRejected(f"{describe_rejection(exc)}: {message}")
    # 5xx, timeouts, dropped connections, bodies that are not JSON at all
    return errors.UpstreamUnavailable(message)


def circuit_outcome(exc: openai.APIError, error: errors.PipelineError) -> str:
    """failed: no answer (connection failure, timeout) or a 5xx that is no format rejection;
    abandoned: a 429 (the limiter's business); answered: the endpoint answered otherwise."""
    if isinstance(error, (errors.RateLimited, errors.CapacityUnavailable)):
        return "abandoned"
    if isinstance(exc, openai.APIConnectionError):
        return "failed"
    if isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
        return "answered" if isinstance(error, errors.FormatRejected) else "failed"
    return "answered"


def describe_rejection(exc: openai.APIStatusError) -> str:
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


def names_the_format(status_code: int, body: str) -> bool:
    """A 400 or 422, or a 5xx, whose body names the request's response_format (as
    llama-cpp-python answers `json_schema` with a 500)."""
    if status_code not in (400, 422) and status_code < 500:
        return False
    return "response_format" in body or "json_schema" in body


def _body(exc: openai.APIStatusError) -> str:
    try:
        return exc.response.text
    except Exception:  # a streamed or closed body: the message is all there is
        return str(exc)
