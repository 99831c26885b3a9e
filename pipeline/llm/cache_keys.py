"""Whether an endpoint takes `prompt_cache_key`: sent until the endpoint refuses it, then never.

A request of a filing's chunk carries a `prompt_cache_key` (`pipeline.extraction.prompting.cache_key`)
so that OpenAI routes the filing's requests, which share a long prefix, to one cache. Servers that
do not know the parameter either ignore it (llama-cpp-python, vLLM and most gateways: nothing to
do) or refuse the request with a 400 that names it (Azure OpenAI: "Unrecognized request argument
supplied: prompt_cache_key"). A refused request is sent again at once without the key; the
endpoint is then known to refuse it, in this process and in Redis for every worker (for a week,
as `pipeline.llm.structured` keeps the structured-output mode), and the reason is logged once:
by the process that records it first.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import replace

import openai
import redis

from pipeline.core import keys, progress
from pipeline.llm.request import MAX_ERROR_CHARS, LLMRequest

log = logging.getLogger(__name__)

PARAMETER = "prompt_cache_key"
TTL_S = 7 * 24 * 3600
"""A week: an endpoint that learns the parameter is sent it again after that."""

_refused: set[str] = set()
"""Endpoint tags this process knows to refuse the key (whichever client of the process learned it)."""
_guard = threading.Lock()


def names_the_key(status_code: int, body: str) -> bool:
    """A 400 or 422 whose body names the parameter: the endpoint does not take it."""
    return status_code in (400, 422) and PARAMETER in body


def tag(endpoint: str) -> str:
    return hashlib.sha256(endpoint.encode()).hexdigest()[:16]


class CacheKeys:
    """What one endpoint does with `prompt_cache_key`, for one client of it."""

    def __init__(self, endpoint: str, client: redis.Redis | None) -> None:
        self._tag = tag(endpoint)
        self._client = client
        self._looked = False

    def fit(self, request: LLMRequest) -> LLMRequest:
        """`request` as the endpoint takes it: without its cache key once the endpoint refused it."""
        if request.cache_key is None or not self.refused():
            return request
        return replace(request, cache_key=None)

    def refused(self) -> bool:
        """Whether the endpoint refuses the key (looked up in Redis once per process and client)."""
        if self._tag in _refused:
            return True
        if not self._looked:
            self._looked = True
            if self._stored():
                with _guard:
                    _refused.add(self._tag)
                return True
        return False

    def refuses(self, exc: openai.APIStatusError) -> bool:
        """`heard` for the error of a request that carried the key."""
        try:
            body = exc.response.text
        except Exception:  # a streamed or closed body: the message is all there is
            body = str(exc)
        return self.heard(exc.status_code, body)

    def heard(self, status_code: int, body: str) -> bool:
        """An answer of the endpoint to a request that carried the key: True when it refuses the
        key (recorded for every worker, the reason logged once), so the request goes again
        without it."""
        if not names_the_key(status_code, body):
            return False
        with _guard:
            first = self._tag not in _refused
            _refused.add(self._tag)
        if first and self._record():
            reason = " ".join(body.split())[:MAX_ERROR_CHARS]
            log.warning(
                "the endpoint refuses %s (HTTP %s: %s): requests go without it from now on, and a "
                "provider's prompt cache is not steered to one machine per filing",
                PARAMETER,
                status_code,
                reason,
            )
        return True

    def _record(self) -> bool:
        """Record the refusal for every worker; True when this process is the first to (or
        there is no Redis to share it in): it says why."""
        if self._client is None:
            return True
        try:
            with progress.blocking():
                return bool(self._client.set(keys.CACHE_KEY.of(self._tag), "refused", nx=True, ex=TTL_S))
        except redis.RedisError as exc:
            log.debug("could not share that the endpoint refuses %s: %s", PARAMETER, exc)
            return True

    def _stored(self) -> bool:
        if self._client is None:
            return False
        try:
            with progress.blocking():
                return bool(self._client.exists(keys.CACHE_KEY.of(self._tag)))
        except redis.RedisError:
            return False


def forget() -> None:
    """This process's knowledge dropped (tests; an operator's endpoint change needs none: the
    tag is the endpoint's)."""
    with _guard:
        _refused.clear()
