"""OpenAI-shaped errors and the refusals every endpoint shares (wrong key, unknown model, ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from pipeline_dev.sim.config import SimConfig
from pipeline_dev.sim.request import ChatRequest


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

    def response(self) -> web.Response:
        return web.json_response(self.body, status=self.status)


def key_refusal(authorization: str, config: SimConfig) -> Refusal | None:
    """401 invalid_api_key when a key is configured and another one is presented."""
    presented = authorization.removeprefix("Bearer ")
    if config.api_key is not None and presented != config.api_key:
        shown = f"{presented[:3]}***{presented[-4:]}" if len(presented) > 8 else "***"
        message = f"Incorrect API key provided: {shown}. You can find your API key in your account."
        return Refusal(401, error_body(message, "invalid_request_error", "invalid_api_key"))
    return None


def request_refusal(chat: ChatRequest, config: SimConfig) -> Refusal | None:
    """What the provider refuses in the request itself, in OpenAI's words, or None."""
    if config.served_models and chat.model not in config.served_models:
        message = f"The model `{chat.model}` does not exist or you do not have access to it."
        return Refusal(404, error_body(message, "invalid_request_error", "model_not_found"))
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
