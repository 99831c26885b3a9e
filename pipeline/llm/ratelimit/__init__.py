"""The global rate limit: one set of windows per (endpoint, model, key slot) in Redis; and the
spend of capped runs, counted next to it."""

from pipeline.llm.ratelimit.budget import SpendMeter
from pipeline.llm.ratelimit.limiter import Limits, Permit, RedisLimiter, Scope, keys
from pipeline.llm.ratelimit.scripts import Decision, ScopeKeys
from pipeline.llm.ratelimit.view import ScopeView

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
