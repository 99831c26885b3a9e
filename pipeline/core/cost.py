"""What LLM calls cost: a price table per model, in USD per million tokens.

The list prices of common models ship (`pipeline.core.prices`); prices change and differ by
contract, so configuration overrides them per model
(`PIPELINE_LLM_PRICES="gpt-4o-mini:0.15/0.60,gpt-4o:2.50/10.00"`: input/output USD per
million tokens). A model missing from both has an unknown cost: its calls are stored with
`cost_usd` NULL, and `pipeline status` says so instead of showing a wrong total.
"""

from __future__ import annotations

from dataclasses import dataclass

PER_MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    input_usd_per_m: float
    output_usd_per_m: float

    def of(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.input_usd_per_m + completion_tokens * self.output_usd_per_m
        ) / PER_MILLION


def parse_prices(spec: str | None) -> dict[str, Price]:
    """`model:input/output,…` → {model: Price}; raises ValueError naming the bad entry."""
    prices: dict[str, Price] = {}
    if not spec:
        return prices
    for part in spec.split(","):
        entry = part.strip()
        if not entry:
            continue
        model, sep, pair = entry.rpartition(":")
        input_usd, slash, output_usd = pair.partition("/")
        try:
            price = Price(float(input_usd), float(output_usd))
        except ValueError:
            price = None
        if not sep or not model or not slash or price is None:
            raise ValueError(
                f"PIPELINE_LLM_PRICES: {entry!r} is not model:input/output (USD per million tokens)"
            )
        if price.input_usd_per_m < 0 or price.output_usd_per_m < 0:
            raise ValueError(f"PIPELINE_LLM_PRICES: {entry!r} has a negative price")
        prices[model] = price
    return prices


def price_of(prices: dict[str, Price], model: str) -> Price | None:
    """`model`'s price; a gateway's `provider/model` name (openai/gpt-4o-mini,
    models/gemini-2.5-flash) falls back to the model's own name."""
    price = prices.get(model)
    if price is None and "/" in model:
        price = prices.get(model.rpartition("/")[2])
    return price


def call_cost(
    prices: dict[str, Price], model: str, prompt_tokens: int, completion_tokens: int
) -> float | None:
    """The call's cost in USD, or None when the model has no price."""
    price = price_of(prices, model)
    return None if price is None else price.of(prompt_tokens, completion_tokens)
