"""A capped run's calls against its budget: the sink that names the run (`Spending`), and the
hold each HTTP attempt of the client takes before it is sent, replaced by what the attempt cost
when it comes back (`pipeline.llm.ratelimit.budget`).

The hold is the attempt's largest cost: its prompt as the limiter reserves it (the estimate,
scaled by what the provider has been counting) and its whole `max_tokens`, at its model's price
for its tier; the cached-input discount is left out, so that it is an upper bound. Every call
the client makes for a capped run holds, whatever its stage (extract, verify, escalate, the
summaries and the report's); a record it did not make (a Batch API line's) is counted as it
comes to the sink.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pipeline.core.cost import Price, price_of
from pipeline.llm.ratelimit.budget import Hold, Recorded, SpendMeter
from pipeline.llm.request import CallRecord, CallSink, LLMRequest

HOLD_SLACK_S = 30.0
"""A hold outlives its attempt's HTTP timeouts by this much before it expires (as the limiter's
in-flight lease does): only a call whose worker died leaves one to expire."""


class Spending:
    """The sink of a capped run's calls: `sink`, with each call counted against the budget."""

    def __init__(self, meter: SpendMeter, run_id: str, sink: CallSink, recorded: Recorded) -> None:
        self.meter, self.run_id, self.sink, self.recorded = meter, run_id, sink, recorded

    def __call__(self, call: CallRecord) -> None:
        self.sink(call)
        if call.mode == "batch" and call.cost_usd:  # a line the provider answered: no hold had it
            self.meter.add(self.run_id, call.cost_usd)


def hold(
    request: LLMRequest, reserved_tokens: int, prices: dict[str, Price], life_s: float
) -> tuple[Spending, Hold] | None:
    """Hold the attempt's largest cost against its run's budget (None: the run has no budget);
    raises BudgetSpent when it does not fit. `reserved_tokens`: the prompt as estimated and
    `max_tokens`, as the limiter reserved them."""
    spending = request.sink
    if not isinstance(spending, Spending):
        return None
    price = price_of(prices, request.model)
    prompt = max(0, reserved_tokens - request.max_tokens)
    largest = price.of(prompt, request.max_tokens) if price is not None else 0.0
    held = spending.meter.hold(spending.run_id, largest, life_s + HOLD_SLACK_S, spending.recorded)
    return spending, held


@contextmanager
def holding(
    request: LLMRequest,
    reserved_tokens: int,
    prices: dict[str, Price],
    life_s: float,
    refused: Callable[[], None],
) -> Iterator[CallSink]:
    """Around one HTTP attempt: its hold taken (`refused` called, and BudgetSpent raised, when it
    does not fit), then replaced by the cost of the record handed to what it yields (none
    handed: nothing billed, the hold is let go)."""
    try:
        held = hold(request, reserved_tokens, prices, life_s)
    except BaseException:
        refused()
        raise
    came_back: list[CallRecord] = []
    try:
        yield came_back.append
    finally:
        if held is not None:
            spending, taken = held
            spending.meter.settle(taken, came_back[-1].cost_usd if came_back else None)
