"""A capped run's spend in Redis: checked before each call without a query, opened and caught up
from what Postgres recorded. Real Redis, real `runs` rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy import Engine, update

from pipeline.core.errors import BudgetSpent
from pipeline.core.keys import BUDGET
from pipeline.llm.ratelimit import SpendMeter
from pipeline.llm.ratelimit.budget import keys
from pipeline.storage import intake, llm_calls
from pipeline.storage.db import session_scope
from pipeline.storage.models import Run


@pytest.fixture
def run_id(engine: Engine, client: redis.Redis) -> Iterator[str]:
    """A run with a $1 budget and nothing spent."""
    made = uuid.uuid4().hex
    with session_scope(engine) as session:
        intake.create_run(
            session, made, name=None, query="q", model="m", prompt_version="v", simulated=True, budget_usd=1.0
        )
    yield made
    client.delete(*keys(made))
    with session_scope(engine) as session:
        intake.delete_run(session, made)


class Recorded:
    """What Postgres has recorded of a run, and how often the meter asked."""

    def __init__(self, engine: Engine, run_id: str) -> None:
        self.engine, self.run_id, self.reads = engine, run_id, 0

    def __call__(self) -> tuple[float | None, float] | None:
        self.reads += 1
        with session_scope(self.engine) as session:
            return llm_calls.recorded_spend(session, self.run_id)

    def spend(self, usd: float) -> None:
        """A cost recorded in Postgres (and not added to the meter)."""
        with session_scope(self.engine) as session:
            session.execute(update(Run).where(Run.id == self.run_id).values(cost_usd=Run.cost_usd + usd))


def test_calls_are_checked_against_the_count_in_redis_not_the_database(
    client: redis.Redis, engine: Engine, run_id: str
) -> None:
    meter, recorded = SpendMeter(client), Recorded(engine, run_id)
    meter.check(run_id, recorded)
    assert recorded.reads == 1, "opened from the database once"
    for _ in range(9):
        meter.add(run_id, 0.1)
        meter.check(run_id, recorded)
    assert recorded.reads == 1
    meter.add(run_id, 0.1)  # ten calls of $0.10: the $1 budget is spent
    with pytest.raises(BudgetSpent, match=r"^budget: the run spent \$1\.0000 of its \$1\.0000$"):
        meter.check(run_id, recorded)
    assert recorded.reads == 1


def test_a_count_redis_lost_is_opened_again_from_what_was_recorded(
    client: redis.Redis, engine: Engine, run_id: str
) -> None:
    meter, recorded = SpendMeter(client), Recorded(engine, run_id)
    recorded.spend(0.6)
    meter.check(run_id, recorded)
    client.delete(*keys(run_id))  # a Redis restarted without its data
    recorded.spend(0.4)
    with pytest.raises(BudgetSpent):
        meter.check(run_id, recorded)
    assert recorded.reads == 2


def test_a_cost_recorded_but_not_counted_is_caught_up_within_the_reconcile_period(
    client: redis.Redis, engine: Engine, run_id: str
) -> None:
    meter, recorded = SpendMeter(client, reconcile_s=0.3), Recorded(engine, run_id)
    meter.check(run_id, recorded)
    meter.add(run_id, 0.5)
    recorded.spend(0.2)  # counted above, recorded since: no double count
    recorded.spend(0.6)  # a batch line's cost, or an older worker's: recorded only
    meter.check(run_id, recorded)  # within the period: the count stands at 0.5
    assert int(client.hget(keys(run_id)[0], "spent") or 0) == 500_000_000
    marker = keys(run_id)[1]
    assert 0 < client.pttl(marker) <= 300, "the period is the reconcile marker's TTL"
    client.delete(marker)  # the period ran out (a Redis TTL: no clock of ours to move)
    meter.check(run_id, recorded)
    spent = int(client.hget(keys(run_id)[0], "spent") or 0)
    assert spent == 800_000_000, "raised to the record, never summed with it"
    meter.add(run_id, 0.2)
    with pytest.raises(BudgetSpent, match=r"spent \$1\.0000"):
        meter.check(run_id, recorded)


def test_runs_without_a_budget_leave_nothing_in_redis(client: redis.Redis, engine: Engine) -> None:
    meter, missing = SpendMeter(client), uuid.uuid4().hex
    meter.check(missing, Recorded(engine, missing))  # no such run: nothing to refuse
    assert not client.exists(keys(missing)[0])
    client.delete(*keys(missing))


def test_every_key_is_prefixed_and_expires(client: redis.Redis, engine: Engine, run_id: str) -> None:
    meter = SpendMeter(client)
    meter.check(run_id, Recorded(engine, run_id))
    meter.add(run_id, 0.01)
    present = [k for k in keys(run_id) if client.exists(k)]
    assert present and all(k.startswith(f"{BUDGET.prefix}{{") for k in present)
    assert all(client.pttl(k) > 0 for k in present)


def test_without_redis_every_check_asks_the_database(engine: Engine, run_id: str) -> None:
    meter, recorded = SpendMeter(None), Recorded(engine, run_id)
    meter.add(run_id, 5.0)  # nowhere to count it: the database's record is the check
    meter.check(run_id, recorded)
    recorded.spend(1.0)
    with pytest.raises(BudgetSpent):
        meter.check(run_id, recorded)
    assert recorded.reads == 2


def test_a_redis_that_is_down_falls_back_to_the_database(engine: Engine, run_id: str) -> None:
    unreachable: redis.Redis = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    meter, recorded = SpendMeter(unreachable), Recorded(engine, run_id)
    meter.add(run_id, 0.5)  # lost, with a warning; the call itself goes on
    meter.check(run_id, recorded)
    recorded.spend(1.0)
    with pytest.raises(BudgetSpent):
        meter.check(run_id, recorded)


def test_calls_in_flight_hold_their_largest_cost_and_what_does_not_fit_is_refused(
    client: redis.Redis, engine: Engine, run_id: str
) -> None:
    """Issue 47, item 6: a call is held against the budget before it goes, so calls that start
    at once cannot all find room: the hold is replaced by what the call cost when it comes back."""
    meter, recorded = SpendMeter(client), Recorded(engine, run_id)
    first = meter.hold(run_id, 0.4, 60, recorded)
    second = meter.hold(run_id, 0.4, 60, recorded)
    with pytest.raises(
        BudgetSpent, match=r"calls in flight hold \$0\.8000: no room for a call that may cost \$0\.4000"
    ):
        meter.hold(run_id, 0.4, 60, recorded)
    meter.settle(first, 0.1)  # it cost less than its largest cost
    third = meter.hold(run_id, 0.4, 60, recorded)
    meter.settle(second, None)  # it failed: nothing billed
    meter.settle(third, 0.3)
    assert int(client.hget(keys(run_id)[0], "spent") or 0) == 400_000_000
    assert int(client.hget(keys(run_id)[0], "held") or 0) == 0 and not client.exists(keys(run_id)[2])
    meter.hold(run_id, 0.6, 60, recorded)  # exactly the rest fits
    with pytest.raises(BudgetSpent):
        meter.hold(run_id, 0.01, 60, recorded)
    assert recorded.reads == 1, "opened from the database once"


def test_a_hold_whose_call_never_came_back_expires(client: redis.Redis, engine: Engine, run_id: str) -> None:
    meter, recorded = SpendMeter(client), Recorded(engine, run_id)
    lost = meter.hold(run_id, 0.9, 60, recorded)  # its worker died mid-call
    with pytest.raises(BudgetSpent):
        meter.hold(run_id, 0.2, 60, recorded)
    client.zadd(keys(run_id)[2], {lost.member: 0})  # its life ran out (Redis TIME: no clock to move)
    meter.settle(meter.hold(run_id, 0.2, 60, recorded), 0.2)
    assert int(client.hget(keys(run_id)[0], "held") or 0) == 0
    meter.settle(lost, 0.5)  # came back after all: counted, not taken from the holds twice
    assert int(client.hget(keys(run_id)[0], "spent") or 0) == 700_000_000
    assert int(client.hget(keys(run_id)[0], "held") or 0) == 0


def test_without_redis_a_hold_is_checked_against_the_database(engine: Engine, run_id: str) -> None:
    meter, recorded = SpendMeter(None), Recorded(engine, run_id)
    meter.settle(meter.hold(run_id, 0.9, 60, recorded), 0.9)  # nothing held, nothing counted
    recorded.spend(0.5)
    with pytest.raises(BudgetSpent, match="no room"):
        meter.hold(run_id, 0.6, 60, recorded)
