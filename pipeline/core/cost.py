"""What LLM calls cost: a price table per model, in USD per million tokens.

The list prices of common models ship (`pipeline.core.prices`); prices change and differ by
contract, so configuration overrides them per model
(`PIPELINE_LLM_PRICES="gpt-4o-mini:0.15/0.60,gpt-4o:2.50/10.00"`: input/output USD per
million tokens). A model missing from both has an unknown cost: its calls are stored with
`cost_usd` NULL, and `pipeline status` says so instead of showing a wrong total.

A third figure is the cached-input price (`gpt-4o-mini:0.15/0.60/0.075`): what a prompt token
served from the provider's prompt cache costs (`usage.prompt_tokens_details.cached_tokens`).
Without it, cached tokens cost the input price: the ledger never claims a discount the contract
may not give. A call costs

    (prompt - cached) x input + cached x cached-input + completion x output

per million tokens; at the batch and flex tiers, every figure is discounted alike.
"""

from __future__ import annotations

from dataclasses import dataclass

PER_MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    input_usd_per_m: float
    output_usd_per_m: float
    cached_input_usd_per_m: float | None = None
    """A prompt token served from the provider's cache; None: the input price (no discount)."""

    @property
    def cached_usd_per_m(self) -> float:
        """The cached-input price in force (the input price when none is set)."""
        return self.input_usd_per_m if self.cached_input_usd_per_m is None else self.cached_input_usd_per_m

    def of(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        """USD for a call's usage; `cached_tokens` are part of `prompt_tokens`, as providers
        report them (at most all of it)."""
        cached = min(max(cached_tokens, 0), prompt_tokens)
        return (
            (prompt_tokens - cached) * self.input_usd_per_m
            + cached * self.cached_usd_per_m
            + completion_tokens * self.output_usd_per_m
        ) / PER_MILLION

    def scaled(self, share: float) -> Price:
        """Every figure x `share` (a tier's discount: batch, flex)."""
        cached = None if self.cached_input_usd_per_m is None else self.cached_input_usd_per_m * share
        return Price(self.input_usd_per_m * share, self.output_usd_per_m * share, cached)


PRICES_FORMAT = "model:input/output or model:input/output/cached (USD per million tokens)"


def parse_prices(spec: str | None, setting: str = "PIPELINE_LLM_PRICES") -> dict[str, Price]:
    """`model:input/output[/cached],…` → {model: Price}; raises ValueError naming `setting`
    and the bad entry."""
    prices: dict[str, Price] = {}
    if not spec:
        return prices
    for part in spec.split(","):
        entry = part.strip()
        if not entry:
            continue
        model, sep, figures = entry.rpartition(":")
        numbers = figures.split("/")
        try:
            values = [float(n) for n in numbers]
        except ValueError:
            values = []
        if not sep or not model or len(values) not in (2, 3):
            raise ValueError(f"{setting}: {entry!r} is not {PRICES_FORMAT}")
        if min(values) < 0:
            raise ValueError(f"{setting}: {entry!r} has a negative price")
        prices[model] = Price(values[0], values[1], values[2] if len(values) == 3 else None)
    return prices


def price_of(prices: dict[str, Price], model: str) -> Price | None:
    """`model`'s price; a gateway's `provider/model` name (openai/gpt-4o-mini,
    models/gemini-2.5-flash) falls back to the model's own name."""
    price = prices.get(model)
    if price is None and "/" in model:
        price = prices.get(model.rpartition("/")[2])
    return price


def call_cost(
    prices: dict[str, Price], model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> float | None:
    """The call's cost in USD, or None when the model has no price; `cached_tokens` of the
    prompt at the cached-input price."""
    price = price_of(prices, model)
    return None if price is None else price.of(prompt_tokens, completion_tokens, cached_tokens)


def cached_saving(prices: dict[str, Price], model: str, cached_tokens: int) -> float | None:
    """What `cached_tokens` prompt tokens cost less for being served from the provider's cache
    (input price - cached-input price), in USD; None when the model has no price. For estimates:
    a plan's cost with N cached tokens is its cost without them minus this."""
    price = price_of(prices, model)
    if price is None:
        return None
    return max(cached_tokens, 0) * (price.input_usd_per_m - price.cached_usd_per_m) / PER_MILLION
