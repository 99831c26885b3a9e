"""Which structured-output mode an endpoint takes: configured, or found by `auto` and shared.

`auto` starts with `json_schema`. When the endpoint rejects the request's shape, the call moves
one mode down (see `prompts.STRUCTURED_MODES`) and the mode that works is kept in Redis per
endpoint and model, so every worker starts from it; each process keeps it in memory and looks
again only when its mode is rejected. Its round trips are blocking calls reported to the caller's
lease (`pipeline.core.progress`), as the limiter's are: they go to the limiter's Redis.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from pipeline.core import keys, progress
from pipeline.llm.prompts import STRUCTURED_MODES

log = logging.getLogger(__name__)
TTL_S = 7 * 24 * 3600
"""A week: a server that gains json_schema support is tried again after that."""

# Only ever moves down: a worker that saw an older, higher mode rejected must not undo another's
# step further down.
_STEP_DOWN = """
local rank = {}
for i, mode in ipairs(cjson.decode(ARGV[3])) do rank[mode] = i end
local current = redis.call('GET', KEYS[1])
if current and rank[current] and rank[current] >= rank[ARGV[1]] then return current end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return ARGV[1]
"""


def next_mode(configured: str, rejected: str) -> str | None:
    """The mode to ask in once the endpoint rejected `rejected`: under `auto` the next one down
    `STRUCTURED_MODES` (json_schema -> json_object_schema -> json_object -> prompt); None when
    the mode is configured (not `auto`) or no mode is left."""
    if configured != "auto":
        return None
    index = STRUCTURED_MODES.index(rejected)
    if index + 1 >= len(STRUCTURED_MODES):
        return None
    return STRUCTURED_MODES[index + 1]


def rejection_message(configured: str, mode: str, error: str) -> str:
    """The error of a structured request rejected in `mode` with no mode to step down to."""
    how = "no mode was left" if configured == "auto" else "set PIPELINE_LLM_STRUCTURED_OUTPUT=auto"
    return f"the endpoint rejects structured output as {mode} ({how}): {error}"


def key(endpoint: str, model: str) -> str:
    tag = hashlib.sha256(f"{endpoint}|{model}".encode()).hexdigest()[:16]
    return keys.STRUCTURED.of(tag)


class ModeStore:
    def __init__(self, configured: str, client: redis.Redis | None) -> None:
        self.configured = configured
        self._client = client
        self._known: dict[str, str] = {}
        self._confirmed: set[str] = set()
        self._trying: set[str] = set()
        """The keys whose probe is in flight (one call at a time until one is answered)."""
        self._turn = threading.Condition()
        self._step_down = client.register_script(_STEP_DOWN) if client is not None else None

    @property
    def auto(self) -> bool:
        return self.configured == "auto"

    @contextmanager
    def probing(self, endpoint: str, model: str) -> Iterator[None]:
        """Around a call in the current mode: until a call of this process has been answered
        in it, `auto` lets one call at a time try it, so that a document's chunks, sent side by
        side, do not all meet the same refusal."""
        k = key(endpoint, model)
        if not self.auto or k in self._confirmed:
            yield
            return
        # The calls that waited go all at once when the probe is answered, not one after another
        # through a lock: each handing it to the next had to get the interpreter first, and in a
        # worker's first seconds (every thread starting at once) the last waited seconds for that.
        with self._turn:
            self._turn.wait_for(lambda: k in self._confirmed or k not in self._trying)
            if k in self._confirmed:  # answered while this call waited: no more probing
                probe = False
            else:
                self._trying.add(k)
                probe = True
        if not probe:
            yield
            return
        try:
            yield
        finally:
            with self._turn:
                self._trying.discard(k)
                self._turn.notify_all()  # answered: all go; else the next one tries

    def confirm(self, endpoint: str, model: str) -> None:
        """A call in the current mode was answered: the mode works (no more probing)."""
        if self.auto:
            self._confirmed.add(key(endpoint, model))

    def current(self, endpoint: str, model: str) -> str:
        """The mode a call to `model` at `endpoint` uses now."""
        if not self.auto:
            return self.configured
        k = key(endpoint, model)
        if k not in self._known:
            self._known[k] = self._stored(k) or STRUCTURED_MODES[0]
        return self._known[k]

    def found(self, endpoint: str, model: str) -> str | None:
        """What `auto` has recorded for every worker (None: nothing yet)."""
        return self._stored(key(endpoint, model))

    def step_down(self, endpoint: str, model: str, rejected: str) -> str | None:
        """The mode after `rejected` (or the one another worker has already gone down to),
        recorded for every worker; None when no mode is left."""
        lower = next_mode("auto", rejected)
        if lower is None:
            return None
        k = key(endpoint, model)
        if self._step_down is not None:
            try:
                with progress.blocking():
                    raw = self._step_down(keys=[k], args=[lower, TTL_S, json.dumps(STRUCTURED_MODES)])
                lower = raw.decode() if isinstance(raw, bytes) else str(raw)
            except redis.RedisError as exc:  # this process goes on alone
                log.warning("could not share the structured-output mode: %s", exc)
        self._known[k] = lower
        return lower

    def _stored(self, k: str) -> str | None:
        if self._client is None:
            return None
        try:
            with progress.blocking():
                raw = self._client.get(k)
        except redis.RedisError:
            return None
        mode = raw.decode() if isinstance(raw, bytes) else raw
        return mode if mode in STRUCTURED_MODES else None
