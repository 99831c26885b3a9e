"""The global limiter: Redis holds the state, the Lua scripts decide atomically.

One `RedisLimiter` per process. Each call names a scope (endpoint, model, API-key slot):
every scope has its own pacing, window, in-flight leases, pause, adaptive factor and what
the provider's headers said of its limits.

A call is given a send time: calls are spread at the quota's rate (GCRA) with at most
`burst_s` of quota at once, because providers enforce a per-minute quota per second too;
the sliding window only guarantees that no window ever holds more than the quota.

Each round trip to Redis and each sleep is a blocking call told to the lease's watcher
(`pipeline.core.progress`): a wait whose Redis keeps answering keeps the caller's lease, a round
trip that never comes back (a silent peer) loses it, even before the client's socket timeout.

Where no limit applies (none configured, the provider's answers carry none, no pause), a call
runs no script: each process keeps that verdict per scope for `UNLIMITED_RECHECK_S`, then looks
again (one round trip), and drops it at once when an answer states limits or a 429 pauses.

Every clock read goes through `pipeline.llm.ratelimit.clock`: Redis TIME for the decisions, the
process's monotonic clock for how long a verdict is kept; `clock.moved` is the tests' seam.
"""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import redis

from pipeline.core import constants as c
from pipeline.core import progress, replies
from pipeline.core.errors import ConfigError, Deferred, RequestTooLarge
from pipeline.core.settings import Settings, default
from pipeline.llm.ratelimit import clock, policy
from pipeline.llm.ratelimit.scripts import (
    AcquireArgs,
    AcquireKeys,
    Decision,
    PauseArgs,
    PauseKeys,
    ReleaseArgs,
    ReleaseKeys,
    ScopeKeys,
    Scripts,
)

if TYPE_CHECKING:
    from pipeline.llm.ratelimit.view import ScopeView

Sleep = Callable[[float], None]
_PACED = ("rpm", "tpm", "rpm window", "tpm window")
"""Refusal reasons that mean "your turn is later", not "stop"."""
UNLIMITED_RECHECK_S = 2.0
"""How long a process trusts that no limit applies to a scope before it looks in Redis again: a
provider that starts stating limits to another worker, or another worker's 429 pause, is seen
within this (an answer of this process that states limits, or its own 429, is seen at once)."""


@dataclass(frozen=True)
class Limits:
    rpm: int = 0
    tpm: int = 0
    max_inflight: int = 0
    window_s: float = default("rate_limit_window_s")
    margin_s: float = 0.0
    """Added to the window, so admissions stay inside the provider's view of it."""
    burst_s: float = default("rate_limit_burst_s")
    """Seconds of quota that may go at once when calls are paced."""
    pacing: bool = True
    """False: no pacing, the sliding window alone."""
    learn: bool = True
    """The provider's x-ratelimit-limit-* headers set the limits (none configured) or lower them."""

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
class Permit:
    scope: Scope
    id: str
    """"" when no script admitted the call (no limit was in force): it holds nothing in Redis."""
    tokens: int
    waited_s: float


@dataclass(frozen=True)
class _Verdict:
    unlimited: bool
    until_s: float
    """`clock.monotonic_s()` after which it is looked at again"""


def keys(scope: Scope) -> ScopeKeys:
    """Every Redis key of a scope, by name."""
    return ScopeKeys.of(scope.tag)


class RedisLimiter:
    def __init__(
        self,
        client: redis.Redis,
        limits: Limits,
        *,
        lease_s: float,
        recovery_s: float,
        min_factor: float,
        max_wait_s: float,
        probe_s: float = c.LIMITER_PROBE_MS / 1000,
        sleep: Sleep = time.sleep,
        unlimited_recheck_s: float = UNLIMITED_RECHECK_S,
    ) -> None:
        self.client = client
        self.limits = limits
        self.window_ms = int((limits.window_s + limits.margin_s) * 1000)
        self.lease_ms = int(lease_s * 1000)
        self.recovery_ms = int(recovery_s * 1000)
        self.min_factor = min_factor
        self.max_wait_s = max_wait_s
        self.probe_ms = int(probe_s * 1000)
        self._sleep = sleep
        self.burst_ms = int(limits.burst_s * 1000) if limits.pacing else -1
        self.unlimited_recheck_s = unlimited_recheck_s
        self._verdicts: dict[str, _Verdict] = {}
        """Per scope tag: whether a call may skip the scripts (no limit in force), and until when."""
        self._answered: set[str] = set()
        """Scope tags answered without limits since the last look (that keeps `learned` alive)."""
        self._scripts = Scripts(client)

    @classmethod
    def from_settings(cls, settings: Settings, pool_size: int) -> RedisLimiter | None:
        """The process's limiter, on PIPELINE_LIMITER_REDIS_URL (PIPELINE_REDIS_URL unless set);
        None without Redis (then no limit can be configured).

        With no limit configured it still keeps the shared pause after a provider's 429.
        """
        limits = Limits(
            settings.rate_limit_rpm,
            settings.rate_limit_tpm,
            settings.max_inflight,
            settings.rate_limit_window_s,
            c.RATE_LIMIT_MARGIN_S,
            burst_s=settings.rate_limit_burst_s,
            pacing=settings.rate_limit_pacing,
            learn=settings.rate_limit_learn,
        )
        url = settings.limiter_redis_url or settings.redis_url
        if not url:
            if limits.active:
                raise ConfigError("rate limits need PIPELINE_REDIS_URL: the limit is kept in Redis")
            return None
        client: redis.Redis = redis.Redis.from_url(
            url, max_connections=pool_size + 4, **c.REDIS_CLIENT_OPTIONS
        )
        return cls(
            client,
            limits,
            lease_s=settings.llm_timeout_s + c.LIMITER_LEASE_EXTRA_S,
            recovery_s=settings.rate_limit_window_s,  # climb back to the full rate within a window
            min_factor=c.RATE_LIMIT_MIN_FACTOR,
            max_wait_s=settings.limiter_max_wait_s,
        )

    def try_acquire(self, scope: Scope, tokens: int, permit_id: str, max_wait_s: float = 0.0) -> Decision:
        """One atomic attempt: a send time at most `max_wait_s` away, reserved (and recorded),
        or a refusal that says how long to wait before asking again."""
        args = AcquireArgs(
            rpm=self.limits.rpm,
            tpm=self.limits.tpm,
            max_inflight=self.limits.max_inflight,
            cost=tokens,
            permit_id=permit_id,
            window_ms=self.window_ms,
            lease_ms=self.lease_ms,
            recovery_ms=self.recovery_ms,
            ttl_extra_ms=c.LIMITER_KEY_TTL_EXTRA_MS,
            burst_ms=self.burst_ms,
            max_wait_ms=max(0, int(max_wait_s * 1000)),
            learn=int(self.limits.learn),
            probe_ms=self.probe_ms,
            keep_ms=self.lease_ms,  # a call's answer comes back within its lease
            shift_ms=clock.shift_ms(),
        )
        with progress.blocking():
            return self._scripts.acquire(AcquireKeys.of(keys(scope)), args)

    def acquire(
        self, scopes: Sequence[Scope], tokens: int, *, waited_s: float = 0.0, horizon_s: float | None = None
    ) -> Permit:
        """A permit from the first of `scopes` that admits the call, having slept until its
        send time. Raises Deferred (with the wait) when the wait would exceed `max_wait_s`, so
        the task goes back to the queue, and RequestTooLarge when no window can ever hold it.

        `horizon_s`: reserve a send time at most this far ahead; a later turn is asked for
        again once it comes within reach. For calls whose cost is a rough guess (no answer has
        calibrated the estimate yet): a long queue of overestimates would hold the quota idle,
        and their refunds would then crowd the calls reserved after them into the same seconds."""
        if policy.too_large(tokens, self.limits.tpm):
            raise RequestTooLarge(_too_large(tokens, self.limits.tpm))
        start = random.randrange(len(scopes))  # spread calls over the key slots
        ordered = list(scopes[start:]) + list(scopes[:start])
        if self.unlimited(ordered[0]):
            return Permit(ordered[0], "", tokens, waited_s)  # no script ran: nothing to release
        while True:
            permit_id = uuid.uuid4().hex
            decisions = []
            reach = self.max_wait_s - waited_s
            if horizon_s is not None:
                reach = min(reach, horizon_s)
            for scope in ordered:
                decision = self.try_acquire(scope, tokens, permit_id, reach)
                self._note(scope, decision)
                if decision.admitted:
                    break
                if decision.reason == "too_large":
                    raise RequestTooLarge(_too_large(tokens, decision.tpm))
                decisions.append(decision)
            else:
                best = min(decisions, key=lambda d: d.wait_s)
                wait = best.wait_s if best.reason != "inflight" else c.LIMITER_INFLIGHT_POLL_S
                if horizon_s is not None and best.reason in _PACED:
                    wait = max(c.LIMITER_INFLIGHT_POLL_S, wait - horizon_s)  # until it is within reach
                # A little jitter keeps waiting workers from retrying in lock-step.
                wait *= 1 + random.random() * 0.05
                if not policy.wait_in_place(wait, waited_s, self.max_wait_s):
                    raise Deferred(f"limiter: {best.reason} for {best.wait_s:.1f} s", retry_after_s=wait)
                self._nap(wait)
                waited_s += wait
                continue
            permit = Permit(scope, permit_id, tokens, waited_s + decision.wait_s)
            if decision.wait_s <= 0:
                return permit
            self._nap(decision.wait_s)
            waited_s += decision.wait_s
            if self.paused_for_s(scope) <= 0:
                return permit
            # A 429 paused everyone while this call waited for its turn: ask again after it.
            self.release(permit, None, sent=False)

    def _nap(self, seconds: float) -> None:
        """Wait for the call's turn: a blocking call as long as the wait."""
        with progress.blocking(seconds):
            self._sleep(seconds)

    def unlimited(self, scope: Scope) -> bool:
        """Whether no limit applies to `scope` now, so that a call may skip the scripts: nothing
        configured, the provider's answers state no limits (with learning on, one has come back:
        until then the first call is the probe), and no pause holds. Looked up in Redis (one
        round trip) at most every `unlimited_recheck_s` per scope and process."""
        if self.limits.active:
            return False
        verdict = self._verdicts.get(scope.tag)
        now_s = clock.monotonic_s()
        if verdict is None or verdict.until_s <= now_s:
            verdict = _Verdict(self._look(scope), now_s + self.unlimited_recheck_s)
            self._verdicts[scope.tag] = verdict
        return verdict.unlimited

    def _note(self, scope: Scope, decision: Decision) -> None:
        """What a script's decision tells of the verdict, so that no look is needed: limits in
        force, or an admission with none in force once the provider has been heard."""
        if self.limits.active:
            return
        if decision.rpm or decision.tpm:
            unlimited = False
        elif decision.admitted and (decision.heard or not self.limits.learn):
            unlimited = True
        else:
            return
        self._verdicts[scope.tag] = _Verdict(unlimited, clock.monotonic_s() + self.unlimited_recheck_s)

    def _look(self, scope: Scope) -> bool:
        k = keys(scope)
        pause, learned = k.pause, k.learned
        answered = self.limits.learn and scope.tag in self._answered
        self._answered.discard(scope.tag)
        with progress.blocking(), self.client.pipeline(transaction=False) as pipe:
            if answered:
                # What release.lua does for each answer: the provider was heard, without limits.
                pipe.hset(learned, "seen", "1")
                pipe.pexpire(learned, c.LIMITER_LEARNED_TTL_MS)
            pipe.time()
            pipe.hmget(learned, ["rpm", "tpm", "seen"])
            pipe.get(pause)
            *_, now, (rpm, tpm, seen), paused = pipe.execute()
        if replies.integer(paused) > clock.now_ms(now):
            return False
        return not self.limits.learn or (
            seen is not None and not replies.integer(rpm) and not replies.integer(tpm)
        )

    def paused_for_s(self, scope: Scope) -> float:
        """How long the shared pause of `scope` still holds (0: none)."""
        with progress.blocking(), self.client.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.get(keys(scope).pause)
            now, until = pipe.execute()
        return max(0, replies.integer(until) - clock.now_ms(now)) / 1000

    def release(
        self,
        permit: Permit,
        told: policy.ProviderLimits | None,
        charged_tokens: int | None = None,
        *,
        sent: bool = True,
    ) -> tuple[float, float]:
        """Free the in-flight lease. `told`: what the provider's answer said of its limits
        (None: no answer came back). The provider wins: when it has less room than our own
        window leaves, the pacing moves later. Returns how much later (requests, tokens; s).
        `sent=False`: the call never went out, and its reservation leaves the window.

        `charged_tokens`: what the provider charged the quota, when known; a reservation above it
        is refunded. Providers charge a request's prompt and its max_tokens when it arrives
        (OpenAI's guide), not what the answer used, so that is what the caller passes.

        A permit given without the scripts (no limit was in force) ends without Redis, unless
        its answer states limits: those are learned as any answer's are, and calls go through
        the scripts from then on."""
        if not permit.id:
            if told is None or not self.limits.learn or not (told.limit_requests or told.limit_tokens):
                if told is not None:
                    self._answered.add(permit.scope.tag)
                return 0.0, 0.0
            self._verdicts.pop(permit.scope.tag, None)
            permit = replace(permit, id=uuid.uuid4().hex)  # in no window: only the learning applies
        args = ReleaseArgs(
            permit_id=permit.id,
            window_ms=self.window_ms,
            recovery_ms=self.recovery_ms,
            rpm=self.limits.rpm,
            tpm=self.limits.tpm,
            **ReleaseArgs.headers(told or policy.ProviderLimits()),
            answered=int(told is not None) if sent else -1,
            learned_ttl_ms=c.LIMITER_LEARNED_TTL_MS,
            charged_tokens=-1 if charged_tokens is None else charged_tokens,
            learn=int(self.limits.learn),
            shift_ms=clock.shift_ms(),
        )
        with progress.blocking():
            pushed = self._scripts.release(ReleaseKeys.of(keys(permit.scope)), args)
        if told is not None and not (told.limit_requests or told.limit_tokens):
            verdict = self._verdicts.get(permit.scope.tag)
            if verdict is not None and not verdict.unlimited:
                del self._verdicts[permit.scope.tag]  # answered without limits: look again now
        return pushed.requests_s, pushed.tokens_s

    def pause(
        self, scope: Scope, seconds: float, *, cut: bool = True, decrease: float = c.AIMD_DECREASE
    ) -> tuple[float, float]:
        """Make every worker of `scope` wait `seconds`; with `cut`, multiply the adaptive factor
        by `decrease`. Returns (pause until, unix s; factor now)."""
        self._verdicts.pop(scope.tag, None)  # this process's next call waits the pause out
        args = PauseArgs(
            pause_ms=max(1, int(seconds * 1000)),
            decrease=decrease if cut else 1,
            min_factor=self.min_factor,
            recovery_ms=self.recovery_ms,
            cooldown_ms=c.AIMD_COOLDOWN_MS,
            ttl_ms=c.LIMITER_KEY_TTL_EXTRA_MS,
            shift_ms=clock.shift_ms(),
        )
        with progress.blocking():
            paused = self._scripts.pause(PauseKeys.of(keys(scope)), args)
        return paused.until_s, paused.factor

    def view(self, scope: Scope) -> ScopeView:
        """A read-only look at a scope's state (what `pipeline status` shows)."""
        from pipeline.llm.ratelimit.view import scope_view

        return scope_view(self, scope)


def _too_large(tokens: int, tpm: int) -> str:
    return (
        f"one call needs about {tokens:,} tokens, more than the {tpm:,}-token "
        "quota per window: it can never be admitted (lower the chunk size or max_tokens)"
    )
