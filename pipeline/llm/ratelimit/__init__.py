"""The global rate limit: one set of windows per (endpoint, model, key slot) in Redis."""

from pipeline.llm.ratelimit.limiter import Decision, Limits, Permit, RedisLimiter, Scope, ScopeView, keys

__all__ = ["Decision", "Limits", "Permit", "RedisLimiter", "Scope", "ScopeView", "keys"]
