"""The global limiter: Redis holds the state, the Lua scripts decide atomically.

One `RedisLimiter` per process. Each call names a scope (endpoint, model, API-key slot):
every scope has its own windows, in-flight leases, pause and adaptive factor.
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis

from pipeline.core import constants as c
from pipeline.core.errors import ConfigError, Deferred, RequestTooLarge
from pipeline.core.settings import Settings
from pipeline.llm.ratelimit import policy

Sleep = Callable[[float], None]
_FIELDS = ("log", "costs", "tokens", "inflight", "pause", "aimd")


@dataclass(frozen=True)
class Limits:
    rpm: int = 0
    tpm: int = 0
    max_inflight: int = 0
    window_s: float = 60.0
    margin_s: float = 0.0
    """Added to the window, so admissions stay inside the provider's view of it."""

    @property
    def active(self) -> bool:
        return bool(self.rpm or self.tpm or self.max_inflight)


@dataclass(frozen=True)
class Scope:
    """What a quota belongs to. The key slot is a number: keys themselves are never stored."""

    endpoint: str
    model: str
    key_slot: int = 0

    @property
    def tag(self) -> str:
        raw = f"{self.endpoint}|{self.model}|{self.key_slot}".encode()
        return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class Decision:
    admitted: bool
    wait_s: float
    reason: str
    requests_in_window: int
    tokens_in_window: int
    factor: float
    at_ms: int
    """Redis time of the decision."""


@dataclass(frozen=True)
class Permit:
    scope: Scope
    id: str
    tokens: int
    waited_s: float


@dataclass(frozen=True)
class ScopeView:
    """What `pipeline status` shows of one scope."""

    scope: Scope
    requests_in_window: int
    tokens_in_window: int
    inflight: int
    paused_for_s: float
    factor: float
    effective_rpm: int
    effective_tpm: int


def keys(scope: Scope) -> list[str]:
    """Every Redis key of a scope: one prefix, and a hash tag so a cluster keeps them together."""
    return [f"{c.LIMITER_KEY_PREFIX}:{{{scope.tag}}}:{field}" for field in _FIELDS]


def _script(name: str) -> str:
    return resources.files("pipeline.llm.ratelimit").joinpath(name).read_text(encoding="utf-8")


class RedisLimiter:
    def __init__(
        self,
        client: redis.Redis,
        limits: Limits,
        *,
        lease_s: float,
        recovery_s: float = 300.0,
        min_factor: float = 0.2,
        max_wait_s: float = c.DEFAULT_LIMITER_MAX_WAIT_S,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.client = client
        self.limits = limits
        self.window_ms = int((limits.window_s + limits.margin_s) * 1000)
        self.lease_ms = int(lease_s * 1000)
        self.recovery_ms = int(recovery_s * 1000)
        self.min_factor = min_factor
        self.max_wait_s = max_wait_s
        self._sleep = sleep
        self._acquire = client.register_script(_script("acquire.lua"))
        self._release = client.register_script(_script("release.lua"))
        self._pause = client.register_script(_script("pause.lua"))

    @classmethod
    def from_settings(cls, settings: Settings, pool_size: int) -> RedisLimiter | None:
        """The process's limiter; None without Redis (then no limit can be configured).

        With no limit configured it still keeps the shared pause after a provider's 429.
        """
        limits = Limits(
            settings.rate_limit_rpm,
            settings.rate_limit_tpm,
            settings.max_inflight,
            settings.rate_limit_window_s,
            settings.rate_limit_margin_s,
        )
        if not settings.redis_url:
            if limits.active:
                raise ConfigError("rate limits need PIPELINE_REDIS_URL: the limit is kept in Redis")
            return None
        client: redis.Redis = redis.Redis.from_url(settings.redis_url, max_connections=pool_size + 4)
        return cls(
            client,
            limits,
            lease_s=settings.llm_timeout_s + c.LIMITER_LEASE_EXTRA_S,
            recovery_s=settings.rate_limit_recovery_s,
            min_factor=settings.rate_limit_min_factor,
            max_wait_s=settings.limiter_max_wait_s,
        )

    def try_acquire(self, scope: Scope, tokens: int, permit_id: str) -> Decision:
        """One atomic attempt: admitted (and recorded) or told how long to wait."""
        admitted, wait_ms, reason, requests, used, factor, at_ms = self._acquire(
            keys=keys(scope),
            args=[
                self.limits.rpm,
                self.limits.tpm,
                self.limits.max_inflight,
                tokens,
                permit_id,
                self.window_ms,
                self.lease_ms,
                self.recovery_ms,
                c.LIMITER_KEY_TTL_EXTRA_MS,
            ],
        )
        return Decision(
            admitted=bool(admitted),
            wait_s=int(wait_ms) / 1000,
            reason=_text(reason),
            requests_in_window=int(requests),
            tokens_in_window=int(used),
            factor=int(factor) / 1e6,
            at_ms=int(at_ms),
        )

    def acquire(self, scopes: Sequence[Scope], tokens: int, *, waited_s: float = 0.0) -> Permit:
        """A permit from the first of `scopes` that admits the call, waiting in place for short
        waits. Raises Deferred (with the wait) when the wait would exceed `max_wait_s`, so
        the task goes back to the queue, and RequestTooLarge when no window can ever hold it."""
        if policy.too_large(tokens, self.limits.tpm):
            raise RequestTooLarge(
                f"one call needs about {tokens:,} tokens, more than the {self.limits.tpm:,}-token "
                "quota per window: it can never be admitted (lower the chunk size or max_tokens)"
            )
        permit_id = uuid.uuid4().hex
        start = random.randrange(len(scopes))  # spread calls over the key slots
        ordered = list(scopes[start:]) + list(scopes[:start])
        while True:
            decisions = []
            for scope in ordered:
                decision = self.try_acquire(scope, tokens, permit_id)
                if decision.admitted:
                    return Permit(scope, permit_id, tokens, waited_s)
                decisions.append(decision)
            best = min(decisions, key=lambda d: d.wait_s)
            wait = best.wait_s if best.reason != "inflight" else c.LIMITER_INFLIGHT_POLL_S
            # A little jitter keeps waiting workers from retrying in lock-step.
            wait *= 1 + random.random() * 0.05
            if not policy.wait_in_place(wait, waited_s, self.max_wait_s):
                raise Deferred(f"limiter: {best.reason} for {best.wait_s:.1f} s", retry_after_s=wait)
            self._sleep(wait)
            waited_s += wait

    def release(self, permit: Permit, tokens_used: int | None) -> None:
        """Free the in-flight lease; set the reservation to the tokens the call used."""
        k = keys(permit.scope)
        self._release(keys=[k[1], k[2], k[3]], args=[permit.id, -1 if tokens_used is None else tokens_used])

    def pause(self, scope: Scope, seconds: float, *, cut: bool = True) -> tuple[float, float]:
        """Make every worker of `scope` wait `seconds`; with `cut`, lower the adaptive factor.
        Returns (pause until, unix s; factor now)."""
        k = keys(scope)
        until_ms, factor = self._pause(
            keys=[k[4], k[5]],
            args=[
                max(1, int(seconds * 1000)),
                c.AIMD_DECREASE if cut else 1,
                self.min_factor,
                self.recovery_ms,
                c.AIMD_COOLDOWN_MS,
                c.LIMITER_KEY_TTL_EXTRA_MS,
            ],
        )
        return int(until_ms) / 1000, int(factor) / 1e6

    def view(self, scope: Scope) -> ScopeView:
        """A read-only look at a scope's state."""
        log, costs, _, inflight, pause, aimd = keys(scope)
        # Pipelines: fewer round trips, and results typed alike by every redis-py version.
        with self.client.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.hmget(aimd, ["factor", "cut_at"])
            pipe.get(pause)
            (seconds, micros), state, paused_raw = pipe.execute()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zrangebyscore(log, now_ms - self.window_ms, "+inf")
            pipe.zcount(inflight, now_ms, "+inf")
            raw_ids, inflight_count = pipe.execute()
        ids = [_text(i) for i in raw_ids]
        used = 0
        if ids:
            with self.client.pipeline(transaction=False) as pipe:
                pipe.hmget(costs, ids)
                (reserved,) = pipe.execute()
            used = sum(int(v or 0) for v in reserved)
        factor = policy.effective_factor(
            float(state[0]) if state[0] else None, int(state[1] or 0), now_ms, self.recovery_ms
        )
        paused = int(paused_raw or 0)
        return ScopeView(
            scope=scope,
            requests_in_window=len(ids),
            tokens_in_window=used,
            inflight=int(inflight_count),
            paused_for_s=max(0, paused - now_ms) / 1000,
            factor=factor,
            effective_rpm=policy.scaled_limit(self.limits.rpm, factor),
            effective_tpm=policy.scaled_limit(self.limits.tpm, factor),
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
