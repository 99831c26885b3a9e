"""The OpenAI SDK's request and response path, gone through once at a worker's start, offline.

The SDK builds what a call needs on the process's first call: the type hints its request
transform reads (`response_format`, `messages`, …) and the pydantic models its answer is read
into (`ChatCompletion`, its choices, usage, log-probabilities), built lazily. On a worker's first
document that came on top of the call, under every thread's contention for the interpreter,
and inside the structured-output probe (`pipeline.llm.structured`), during which the process's
other calls wait: the first extraction of a worker waited for it whatever its own work.

`dry_run` sends bodies through an SDK client whose transport is in-process and answers a canned
completion: nothing goes over the network, nothing is billed, and the real clients find the
SDK's caches (per process, not per client) built.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

import httpx
import openai
from pydantic import BaseModel

log = logging.getLogger(__name__)

DRY_RUN_URL = "http://dry-run.invalid/v1"
"""Never resolved: the transport answers in-process."""

CANNED: dict[str, Any] = {
    "id": "chatcmpl-dry-run",
    "object": "chat.completion",
    "created": 0,
    "model": "dry-run",
    "service_tier": "default",
    "system_fingerprint": "fp_dry_run",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "{}", "refusal": None},
            "logprobs": {
                "content": [{"token": "{}", "logprob": -0.01, "bytes": [123, 125], "top_logprobs": []}],
                "refusal": None,
            },
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "total_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    },
}
"""An answer as the chat endpoint gives one, with every part our calls read (log-probabilities
included, for runs that ask for them)."""


class Answer(BaseModel):
    """The schema of the dry run's structured request (its shape is what the SDK reads)."""

    answer: str | None = None


MESSAGES: list[Any] = [{"role": "system", "content": "Dry run."}, {"role": "user", "content": "Dry run."}]


def bodies(structured: dict[str, Any]) -> list[dict[str, Any]]:
    """The bodies of the dry run: `structured` (a structured request's, in the endpoint's
    current mode) and a plain one asking for log-probabilities, as a summary and a trust run's
    extraction ask."""
    plain = {key: value for key, value in structured.items() if key != "response_format"}
    return [structured, {**plain, "logprobs": True, "top_logprobs": 0}]


def dry_run(bodies: Iterable[dict[str, Any]]) -> int:
    """Send each chat-completion body through the SDK (`with_raw_response.create`, then
    `parse()`, as `LLMClient` does) against the canned answer; how many requests the transport
    saw. Best effort: a failure is logged, never raised (the first real call then builds it)."""
    seen = 0

    def answer(request: httpx.Request) -> httpx.Response:
        nonlocal seen
        seen += 1
        return httpx.Response(200, json=CANNED, headers={"x-request-id": "dry-run"})

    started = time.monotonic()
    try:
        with httpx.Client(transport=httpx.MockTransport(answer)) as http:
            client = openai.OpenAI(base_url=DRY_RUN_URL, api_key="dry-run", max_retries=0, http_client=http)
            for body in bodies:
                client.chat.completions.with_raw_response.create(**body).parse()
    except Exception as exc:  # the SDK changed its ways: the first real call builds what it needs
        log.warning("the LLM client's warm-up did not go through: %s", exc)
        return seen
    log.info("LLM client warmed up (%d dry-run request(s), %.2f s)", seen, time.monotonic() - started)
    return seen
