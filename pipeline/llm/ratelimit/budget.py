"""A capped run's spend, kept in Redis next to the limiter: the hold before each call.

Postgres (`runs.cost_usd`) is the record; this is the fast check a capped run's calls make
before they go out, instead of a query each. Each call holds its largest cost (its prompt as
estimated and its whole `max_tokens`, at its model's price) against the budget before it is
sent (`SpendMeter.hold`, one script: threads and workers asking at once are served one at a
time, and a hold that does not fit is refused), and the hold is replaced by what the call cost
when it comes back (`SpendMeter.settle`), before it is recorded; a hold whose call never comes
back (its worker died) expires. A cost with no hold (a batch line's) is added when it is stored
(`SpendMeter.add`). The count is opened from Postgres when Redis has none (the run's first
call, a Redis that lost its data), and every `RECONCILE_S` one caller raises it to the recorded
figure, in case a cost was recorded without being added (a worker of an older version). Its
round trips are blocking calls told to the caller's lease (`pipeline.core.progress`), as the
limiter's are.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import redis
from redis.commands.core import Script

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


def keys(run_id: str) -> tuple[str, str, str]:
    """The run's spend hash, its reconcile marker and its calls' holds (one hash tag: a cluster
    keeps them together)."""
    spend = redis_keys.BUDGET.of(f"{{{run_id}}}")
    return spend, f"{spend}:reconciled", f"{spend}:holds"


def _nano(usd: float) -> int:
    return round(usd * NANO_USD_PER_USD)


def _refuse_if_spent(
    budget_usd: float | None, spent_usd: float, held_usd: float = 0.0, cost_usd: float = 0.0
) -> None:
    """Raise BudgetSpent when the budget is spent, or a call that may cost `cost_usd` does not
    fit beside what is spent and what calls in flight hold (`held_usd`)."""
    if budget_usd is None:
        return
    if spent_usd >= budget_usd or spent_usd + held_usd + cost_usd > budget_usd:
        raise _refusal(budget_usd, spent_usd, held_usd, cost_usd)


def _refusal(budget_usd: float, spent_usd: float, held_usd: float, cost_usd: float) -> BudgetSpent:
    spent = f"budget: the run spent ${spent_usd:.4f} of its ${budget_usd:.4f}"
    if spent_usd >= budget_usd:
        return BudgetSpent(spent)
    return BudgetSpent(
        f"{spent}, calls in flight hold ${held_usd:.4f}: no room for a call that may cost ${cost_usd:.4f}"
    )


@dataclass(frozen=True)
class Hold:
    """A call's largest cost, held against its run's budget until `SpendMeter.settle`."""

    run_id: str
    member: str
    """Its entry in the run's holds ("<id>:<nano-USD>"); "" when nothing is held in Redis."""


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
        scripts: list[Script | None] = [None, None, None]
        if client is not None:
            scripts = [
                client.register_script(_source(n)) for n in ("spend_reconcile", "spend_hold", "spend_settle")
            ]
        self._reconcile, self._hold, self._settle = scripts

    def check(self, run_id: str, recorded: Recorded) -> None:
        """Raise BudgetSpent once the run has spent its budget. One Redis round trip; Postgres
        (`recorded`) only to open the count, and once per `RECONCILE_S` per run."""
        if self.client is None:
            found = recorded()
            if found is not None:
                _refuse_if_spent(*found)
            return
        spend, marker, _ = keys(run_id)
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
        spend = keys(run_id)[0]
        try:
            with progress.blocking(), self.client.pipeline(transaction=False) as pipe:
                pipe.hincrby(spend, "spent", _nano(cost_usd))
                pipe.pexpire(spend, self.ttl_ms)
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("a call's cost could not be counted in Redis (%s); the database has it", exc)

    def hold(self, run_id: str, cost_usd: float, life_s: float, recorded: Recorded) -> Hold:
        """Hold `cost_usd`, the call's largest cost, against the run's budget for at most
        `life_s`; raise BudgetSpent when the budget is spent or the hold does not fit beside what
        is spent and held. One Redis round trip (the check it replaces was one too); Postgres only
        to open the count, and once per `RECONCILE_S` per run. Without Redis (or when it does not
        answer), the recorded cost is checked with the call's cost, and nothing is held."""
        if self.client is None:
            return self._hold_in_database(run_id, cost_usd, recorded)
        assert self._hold is not None
        spend, marker, holds = keys(run_id)
        member = f"{uuid.uuid4().hex}:{max(0, _nano(cost_usd))}"
        life_ms = max(1, int(life_s * 1000))
        args: list[str | int] = [_nano(max(0.0, cost_usd)), member, life_ms, self.ttl_ms, self.reconcile_ms]
        try:
            with progress.blocking():
                granted, budget, spent, held, reconcile = (
                    int(v) for v in self._hold([spend, holds, marker], args)
                )
            if granted < 0:  # the count is not open: open it from the record, and ask again
                if self._open(spend, recorded())[0] is None:
                    return Hold(run_id, "")  # no such run, or no budget: nothing to hold
                with progress.blocking():
                    granted, budget, spent, held, _ = (
                        int(v) for v in self._hold([spend, holds, marker], args)
                    )
            elif reconcile:
                self._catch_up(spend, recorded, (budget, spent))
        except redis.RedisError as exc:
            log.warning("the run's spend could not be held in Redis (%s): checked in the database", exc)
            return self._hold_in_database(run_id, cost_usd, recorded)
        if not granted:
            usd = [n / NANO_USD_PER_USD for n in (budget, spent, held)]
            raise _refusal(usd[0], usd[1], usd[2], cost_usd)
        return Hold(run_id, member)

    def settle(self, hold: Hold, cost_usd: float | None) -> None:
        """The held call came back: its hold is replaced by what it cost (None or 0: nothing
        billed, the hold is let go). Best effort: a hold left behind expires, and the next
        reconcile catches up on a cost that Redis missed."""
        if self.client is None or not hold.member:
            return
        assert self._settle is not None
        spend, _, holds = keys(hold.run_id)
        try:
            with progress.blocking():
                self._settle(
                    keys=[spend, holds], args=[hold.member, _nano(max(0.0, cost_usd or 0.0)), self.ttl_ms]
                )
        except redis.RedisError as exc:
            log.warning("a call's cost could not be counted in Redis (%s); the database has it", exc)

    def _hold_in_database(self, run_id: str, cost_usd: float, recorded: Recorded) -> Hold:
        found = recorded()
        if found is not None:
            _refuse_if_spent(found[0], found[1], 0.0, cost_usd)
        return Hold(run_id, "")


def _source(name: str) -> str:
    return resources.files("pipeline.llm.ratelimit").joinpath(f"{name}.lua").read_text("utf-8")
