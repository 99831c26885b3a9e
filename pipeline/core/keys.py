"""Every Redis key the pipeline writes: its pattern, how long it lives and which module owns it.

The deployment's Redis is shared by the broker (Celery's own keys: `celery`, `unacked*`,
`_kombu.*`, `celery-task-meta-*`, expiring after `workers.app.RESULT_EXPIRES_S`) and by these.
A module builds its keys from its entry here, and no other module writes them: an operator (or a
review) reads here what a key is before deleting it, and a new key cannot collide with another's
prefix unnoticed (`tests/test_units.py` checks that no prefix is another's).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RedisKey:
    prefix: str
    """The key, or its start: the rest (a run, an owner, a scope) follows `prefix` as written."""
    ttl: str
    """How long it lives, in words (the owner's constants hold the numbers)."""
    owner: str
    """The module that writes it."""
    what: str

    def of(self, name: str = "") -> str:
        return f"{self.prefix}{name}"


WORKER = RedisKey(
    "pipeline:worker:",
    "one lease (PIPELINE_LEASE_S), renewed at each beat",
    "pipeline.recovery.heartbeat",
    "<owner>: a worker process is alive, with what it holds and the inbox it reads",
)
DEPLOYMENT = RedisKey(
    "pipeline:deployment",
    "none: made once by the first worker",
    "pipeline.recovery.heartbeat",
    "the deployment's id, carried by every lease (workers judge alive only owners they can see)",
)
RECEIVED = RedisKey(
    "pipeline:received:",
    "a day after its owner's last beat (RECEIVED_TTL_S)",
    "pipeline.recovery.deliveries",
    "<owner>: the deliveries a process received and has not handled yet",
)
RECEIVERS = RedisKey(
    "pipeline:receivers",
    "none: members leave with their set",
    "pipeline.recovery.deliveries",
    "the owners that have a received set",
)
STEP = RedisKey(
    "pipeline:step:",
    "one lease, renewed by its holder's heartbeat (a finalize poller's and a batch chain's: their own)",
    "pipeline.recovery.steps",
    "<step>: a step lease (the one lock): synthesize:<run>, compress:<doc>, partial:<id>, "
    "report:<run>, finalize-poller:<run>, batch:<run>, batch-chain:<run>, stranded:<run>, "
    "batch-poll:<run>, beat:<inbox> (the one beat that fires a schedule: pipeline.recovery.beat_lease)",
)
LIMITER = RedisKey(
    "pipeline:rl:",
    "its window's length; what the provider's headers said: LIMITER_LEARNED_TTL_MS",
    "pipeline.llm.ratelimit.limiter",
    "{<scope>}:<field>: the global rate limit's windows, in-flight leases and learned limits",
)
BUDGET = RedisKey(
    "pipeline:budget:",
    "a day after the run's last call (SPEND_KEY_TTL_S)",
    "pipeline.llm.ratelimit.budget",
    "{<run>}...: a run's spend against PIPELINE_RUN_BUDGET_USD, and what its calls in flight hold",
)
STRUCTURED = RedisKey(
    "pipeline:structured:",
    "a week (TTL_S)",
    "pipeline.llm.structured",
    "<endpoint tag>: whether an endpoint takes structured output (json_schema) or not",
)

CACHE_KEY = RedisKey(
    "pipeline:cache-key:",
    "a week (TTL_S)",
    "pipeline.llm.cache_keys",
    "<endpoint tag>: the endpoint refuses the prompt_cache_key parameter (requests go without it)",
)

CIRCUIT = RedisKey(
    "pipeline:circuit:",
    "while the endpoint fails, and a while after (pipeline.llm.circuit's constants)",
    "pipeline.llm.circuit",
    "{<endpoint tag>}: an endpoint's circuit breaker (its failures, open-until and the probe's holder)",
)

CANCELLED = RedisKey(
    "pipeline:cancelled:",
    "a week (STOP_TTL_S)",
    "pipeline.llm.stops",
    "<run>: the run was cancelled (the value is why): no call for it goes out",
)

NIGHTLY = RedisKey(
    "pipeline:nightly:",
    "a week (SLOT_TTL_S)",
    "pipeline.runs.nightly",
    "<inbox>@<slot>: the nightly submit of an inbox for one scheduled slot was taken (by whom, then "
    "its run): a second fire for that slot submits nothing",
)

ALL = (
    WORKER,
    DEPLOYMENT,
    RECEIVED,
    RECEIVERS,
    STEP,
    LIMITER,
    BUDGET,
    STRUCTURED,
    CACHE_KEY,
    CIRCUIT,
    CANCELLED,
    NIGHTLY,
)
