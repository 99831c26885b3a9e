"""OpenAI-shaped errors and the refusals every endpoint shares (wrong key, unknown model, ...).

DOCUMENTED holds one error per status from OpenAI's error-codes guide
(https://platform.openai.com/docs/guides/error-codes): what `[[sim:fail-NNN]]` answers on the
chat endpoint and in a batch's lines, and POST /sim/batch-api-errors on the Files and Batches API.
OpenAI shows a refused key masked (`sk-abc***wxyz`); other providers and gateways quote more of
the request. With `echo_key` the simulator is the worst of them: every error quotes, whole, the
API key the request came with (`echoed`), the redaction test's canary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from pipeline_dev.sim.config import SimConfig
from pipeline_dev.sim.request import FAILING_STATUSES, ChatRequest


def error_body(message: str, kind: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    headers: Any = None,
    param: str | None = None,
) -> web.Response:
    """An OpenAI-style error answer."""
    return web.json_response(error_body(message, kind, code, param), status=status, headers=headers)


@dataclass(frozen=True)
class Refusal:
    """A request the provider refuses whatever its load: the status and body it answers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] | None = None

    def response(self) -> web.Response:
        return web.json_response(self.body, status=self.status, headers=self.headers)


def presented_key(authorization: str) -> str:
    """The API key of an Authorization header."""
    return authorization.removeprefix("Bearer ")


def shown_key(key: str, whole: bool) -> str:
    """The key as a refusal quotes it: masked as OpenAI does, or `whole`."""
    if whole:
        return key
    return f"{key[:3]}***{key[-4:]}" if len(key) > 8 else "***"


def echoed(message: str, key: str) -> str:
    """`message` as a provider that quotes the request's API key writes it (`echo_key`)."""
    if not key or key in message:
        return message
    return f"{message} (request made with API key {key})"


def echo_into(error: dict[str, Any], key: str) -> dict[str, Any]:
    """An error object ({"message": ...}) or error body ({"error": {...}}) quoting `key`."""
    inner = error.get("error")
    if isinstance(inner, dict):
        return {**error, "error": echo_into(inner, key)}
    if isinstance(error.get("message"), str):
        return {**error, "message": echoed(error["message"], key)}
    return error


RATE_LIMITED_WAIT_MS = 20
"""How long a documented 429 asks to wait (its `retry-after-ms`, as the SDK reads it)."""
DOCUMENTED: Final[dict[int, tuple[str, str, str | None, str | None]]] = {
    400: (
        "Invalid service_tier argument: The requested service tier is not allowed for this project.",
        "invalid_request_error",
        None,
        "service_tier",
    ),
    401: (
        "Incorrect API key provided: {key}. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "invalid_request_error",
        "invalid_api_key",
        None,
    ),
    403: (
        "Country, region, or territory not supported",
        "request_forbidden",
        "unsupported_country_region_territory",
        None,
    ),
    404: (
        "The model `{model}` does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
        None,
    ),
    429: (
        "Rate limit reached for {model} in organization org-pipeline-sim on requests per min (RPM): "
        f"Limit 3, Used 3, Requested 1. Please try again in {RATE_LIMITED_WAIT_MS}ms.",
        "requests",
        "rate_limit_exceeded",
        None,
    ),
    500: (
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
        None,
    ),
    503: (
        "The engine is currently overloaded, please try again later.",
        "server_error",
        "server_is_overloaded",
        None,
    ),
}
"""status: (message, type, code, param), in OpenAI's words; {key} and {model} are filled in."""


def documented(status: int, key: str, model: str, *, whole_key: bool = False) -> Refusal:
    """OpenAI's documented error of `status` for a request with `key` for `model` (the key
    masked in a 401 unless `whole_key`)."""
    message, kind, code, param = DOCUMENTED[status]
    text = message.format(key=shown_key(key, whole_key), model=model)
    headers = {"retry-after-ms": str(RATE_LIMITED_WAIT_MS)} if status == 429 else None
    return Refusal(status, error_body(text, kind, code, param), headers)


def asked_failure(chat: ChatRequest, key: str, config: SimConfig) -> Refusal | None:
    """The documented error the request's hooks ask for (`[[sim:fail-NNN]]`; `[[sim:badkey]]`: a
    401 that quotes the key whole), or None."""
    if "badkey" in chat.hooks:
        return documented(401, key, chat.model, whole_key=True)
    for status in FAILING_STATUSES:
        if f"fail-{status}" in chat.hooks:
            return documented(status, key, chat.model, whole_key=config.echo_key)
    return None


def key_refusal(authorization: str, config: SimConfig) -> Refusal | None:
    """401 invalid_api_key when a key is configured and another one is presented."""
    presented = presented_key(authorization)
    if config.api_key is not None and presented != config.api_key:
        shown = shown_key(presented, config.echo_key)
        message = f"Incorrect API key provided: {shown}. You can find your API key in your account."
        return Refusal(401, error_body(message, "invalid_request_error", "invalid_api_key"))
    return None


def request_refusal(chat: ChatRequest, config: SimConfig) -> Refusal | None:
    """What the provider refuses in the request itself, in OpenAI's words, or None."""
    if config.served_models and chat.model not in config.served_models:
        message = f"The model `{chat.model}` does not exist or you do not have access to it."
        return Refusal(404, error_body(message, "invalid_request_error", "model_not_found"))
    if config.reject_prompt_cache_key and "prompt_cache_key" in chat.params:
        message = "Unrecognized request argument supplied: prompt_cache_key"
        return Refusal(400, error_body(message, "invalid_request_error", None, "prompt_cache_key"))
    for param in config.unsupported_params:
        if param in chat.params:
            message = f"Unsupported parameter: '{param}' is not supported with this model."
            return Refusal(400, error_body(message, "invalid_request_error", "unsupported_parameter"))
    wanted = chat.prompt_tokens + (chat.max_tokens or 0)
    if config.context_tokens and wanted > config.context_tokens:
        message = (
            f"This model's maximum context length is {config.context_tokens} tokens. However, you "
            f"requested {wanted} tokens ({chat.prompt_tokens} in the messages, {chat.max_tokens or 0} "
            "in the completion). Please reduce the length of the messages or completion."
        )
        return Refusal(400, error_body(message, "invalid_request_error", "context_length_exceeded"))
    return None
