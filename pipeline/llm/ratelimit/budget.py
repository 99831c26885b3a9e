"""A capped run's spend, kept in Redis next to the limiter: the check before each call.

Postgres (`runs.cost_usd`) is the record; this is the fast check a capped run's calls make
before they go out, instead of a query each. A call's cost is added when its answer comes back
(`SpendMeter.add`), before it is recorded. The count is opened from Postgres when Redis has
none (the run's first check, a Redis that lost its data), and every `RECONCILE_S` one checker
raises it to the recorded figure, in case a cost was recorded without being added (a batch
line, a worker of an older version). It errs low by at most what is spent and not yet recorded.
Its round trips are blocking calls told to the caller's lease (`pipeline.core.progress`), as the
limiter's are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources

import redis

from pipeline.core import keys as redis_keys
from pipeline.core import progress
from pipeline.core.errors import BudgetSpent

log = logging.getLogger(__name__)
NANO_USD_PER_USD = 1_000_000_000
SPEND_KEY_TTL_S = 24 * 3600
"""A day after the run's last call, its count goes (Postgres keeps the record)."""
RECONCILE_S = 60.0
"""How often one checker of a run compares the count with what Postgres recorded."""

Recorded = Callable[[], tuple[float | None, float] | None]
"""The run's budget and recorded cost in USD, as Postgres has them (None: no such run)."""


def keys(run_id: str) -> tuple[str, str]:
    """The run's spend hash and its reconcile marker (one hash tag: a cluster keeps them together)."""
    spend = redis_keys.BUDGET.of(f"{{{run_id}}}")
    return spend, f"{spend}:reconciled"


def _nano(usd: float) -> int:
    return round(usd * NANO_USD_PER_USD)


def _refuse_if_spent(budget_usd: float | None, spent_usd: float) -> None:
    if budget_usd is not None and spent_usd >= budget_usd:
        raise BudgetSpent(f"budget: the run spent ${spent_usd:.4f} of its ${budget_usd:.4f}")


class SpendMeter:
    """Runs' spend against their budgets; without Redis, every check asks Postgres."""

    def __init__(
        self,
        client: redis.Redis | None,
        *,
        reconcile_s: float = RECONCILE_S,
        ttl_s: float = SPEND_KEY_TTL_S,
    ) -> None:
        self.client = client
        self.reconcile_ms = max(1, int(reconcile_s * 1000))
        self.ttl_ms = int(ttl_s * 1000)
        text = resources.files("pipeline.llm.ratelimit").joinpath("spend_reconcile.lua").read_text("utf-8")
        self._reconcile = client.register_script(text) if client is not None else None

    def check(self, run_id: str, recorded: Recorded) -> None:
        """Raise BudgetSpent once the run has spent its budget. One Redis round trip; Postgres
        (`recorded`) only to open the count, and once per `RECONCILE_S` per run."""
        if self.client is None:
            found = recorded()
            if found is not None:
                _refuse_if_spent(*found)
            return
        spend, marker = keys(run_id)
        try:
            with progress.blocking(), self.client.pipeline(transaction=False) as pipe:
                pipe.hmget(spend, ["budget", "spent"])
                pipe.set(marker, 1, nx=True, px=self.reconcile_ms)
                (budget, spent), reconcile = pipe.execute()
            if budget is None:
                budget, spent = self._open(spend, recorded())
            elif reconcile:
                budget, spent = self._catch_up(spend, recorded, (int(budget), int(spent or 0)))
        except redis.RedisError as exc:
            log.warning("the run's spend could not be read from Redis (%s): checked in the database", exc)
            found = recorded()
            if found is not None:
                _refuse_if_spent(*found)
            return
        if budget is not None:
            _refuse_if_spent(int(budget) / NANO_USD_PER_USD, int(spent or 0) / NANO_USD_PER_USD)

    def _open(self, spend: str, found: tuple[float | None, float] | None) -> tuple[int | None, int]:
        if found is None or found[0] is None:
            return None, 0  # no such run, or no budget: nothing to count
        assert self._reconcile is not None
        with progress.blocking():
            budget, spent = self._reconcile(
                keys=[spend], args=[_nano(found[0]), _nano(found[1]), self.ttl_ms]
            )
        return int(budget), int(spent)

    def _catch_up(self, spend: str, recorded: Recorded, counted: tuple[int, int]) -> tuple[int | None, int]:
        try:
            found = recorded()
        except Exception as exc:  # the database: the count stands until the next reconcile
            log.info("the run's recorded spend could not be read (%s): Redis's count stands", exc)
            return counted
        return self._open(spend, found)

    def add(self, run_id: str, cost_usd: float) -> None:
        """Count a call's cost (when its answer came back). Best effort: Postgres keeps the
        record, and the next reconcile catches up on a cost that Redis missed."""
        if self.client is None or cost_usd <= 0:
            return
        spend, _ = keys(run_id)
        try:
            with progress.blocking(), self.client.pipeline(transaction=False) as pipe:
                pipe.hincrby(spend, "spent", _nano(cost_usd))
                pipe.pexpire(spend, self.ttl_ms)
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("a call's cost could not be counted in Redis (%s); the database has it", exc)
