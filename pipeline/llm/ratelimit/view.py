"""A read-only look at one scope of the limiter: what `pipeline status` shows of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.core import replies
from pipeline.llm.ratelimit import clock, policy
from pipeline.llm.ratelimit.limiter import Scope, keys

if TYPE_CHECKING:
    from pipeline.llm.ratelimit.limiter import RedisLimiter


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
    learned_rpm: int = 0
    learned_tpm: int = 0
    """What the provider's x-ratelimit-limit-* headers said (0: nothing heard)."""
    rpm_in_force: int = 0
    tpm_in_force: int = 0


def scope_view(limiter: RedisLimiter, scope: Scope) -> ScopeView:
    """A read-only look at a scope's state."""
    k = keys(scope)
    # Pipelines: fewer round trips, and results typed alike by every redis-py version.
    with limiter.client.pipeline(transaction=False) as pipe:
        pipe.time()
        pipe.hmget(k.aimd, ["factor", "cut_at"])
        pipe.get(k.pause)
        pipe.hmget(k.learned, ["rpm", "tpm"])
        now, (cut_factor, cut_at), paused_raw, (learned_rpm, learned_tpm) = pipe.execute()
    now_ms = clock.now_ms(now)
    with limiter.client.pipeline(transaction=False) as pipe:
        pipe.zrangebyscore(k.log, now_ms - limiter.window_ms, "+inf")
        pipe.zcount(k.inflight, now_ms, "+inf")
        raw_ids, inflight_count = pipe.execute()
    ids = [replies.text(i) for i in raw_ids]
    used = 0
    if ids:
        with limiter.client.pipeline(transaction=False) as pipe:
            pipe.hmget(k.costs, ids)
            (reserved,) = pipe.execute()
        used = sum(replies.integer(v) for v in reserved)
    factor = policy.effective_factor(
        replies.number(cut_factor), replies.integer(cut_at), now_ms, limiter.recovery_ms
    )
    paused = replies.integer(paused_raw)
    told_rpm, told_tpm = replies.integer(learned_rpm), replies.integer(learned_tpm)
    rpm = policy.limit_in_force(limiter.limits.rpm, told_rpm)
    tpm = policy.limit_in_force(limiter.limits.tpm, told_tpm)
    return ScopeView(
        scope=scope,
        requests_in_window=len(ids),
        tokens_in_window=used,
        inflight=replies.integer(inflight_count),
        paused_for_s=max(0, paused - now_ms) / 1000,
        factor=factor,
        effective_rpm=policy.scaled_limit(rpm, factor),
        effective_tpm=policy.scaled_limit(tpm, factor),
        learned_rpm=told_rpm,
        learned_tpm=told_tpm,
        rpm_in_force=rpm,
        tpm_in_force=tpm,
    )
