"""The global rate limit: one set of windows per (endpoint, model, key slot) in Redis; and the
spend of capped runs, counted next to it."""

from pipeline.llm.ratelimit.budget import SpendMeter
from pipeline.llm.ratelimit.limiter import Limits, Permit, RedisLimiter, Scope, ScopeView, keys
from pipeline.llm.ratelimit.scripts import Decision, ScopeKeys

__all__ = [
    "Decision",
    "Limits",
    "Permit",
    "RedisLimiter",
    "Scope",
    "ScopeKeys",
    "ScopeView",
    "SpendMeter",
    "keys",
]
