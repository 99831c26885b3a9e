"""The simulated provider's own bill: what it served, priced as a provider's invoice prices it.

A second witness for the pipeline's ledger (`llm_calls.cost_usd`): the simulator tallies the
usage of every answer it served (a 200 on the chat endpoint, a line in a batch's output file),
by model and tier, and prices it with the prices it was given (`SimConfig.prices`, the same
`model:input/output/cached` form as PIPELINE_LLM_PRICES, in USD per million tokens). It shares
no code with the pipeline's cost arithmetic on purpose: the two are compared, not derived.

Per request: (prompt - cached) x input + cached x cached-input + completion x output, times the
tier's share of the list price (OpenAI's pricing page: the Batch API and flex processing are
half price, cached input included). A model with no cached price pays its input price for
cached tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

TIER_SHARE = {"default": 1.0, "flex": 0.5, "batch": 0.5}
"""The price of a tier as a share of the list (standard) price."""
PER_MILLION = 1_000_000


@dataclass(frozen=True)
class ListPrice:
    """USD per million tokens."""

    input: float
    output: float
    cached: float


def parse_prices(spec: str) -> dict[str, ListPrice]:
    """`model:input/output[/cached],…` -> {model: ListPrice}; ValueError naming a bad entry."""
    prices: dict[str, ListPrice] = {}
    for part in spec.split(","):
        entry = part.strip()
        if not entry:
            continue
        model, _, figures = entry.rpartition(":")
        numbers = figures.split("/")
        try:
            values = [float(n) for n in numbers]
        except ValueError:
            values = []
        if not model or len(values) not in (2, 3) or min(values) < 0:
            raise ValueError(f"prices: {entry!r} is not model:input/output[/cached] (USD per million)")
        prices[model] = ListPrice(values[0], values[1], values[2] if len(values) == 3 else values[0])
    return prices


@dataclass
class Usage:
    """What was served of one model at one tier."""

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0

    def usd(self, price: ListPrice, share: float) -> float:
        fresh = self.prompt_tokens - self.cached_tokens
        list_usd = (
            fresh * price.input + self.cached_tokens * price.cached + self.completion_tokens * price.output
        )
        return list_usd * share / PER_MILLION


class Bill:
    """Usage by (model, tier) since the start or the last reset."""

    def __init__(self) -> None:
        self.usage: dict[tuple[str, str], Usage] = {}

    def add(
        self, model: str, tier: str, prompt_tokens: int, cached_tokens: int, completion_tokens: int
    ) -> None:
        """One answer served; `tier`: default (standard), flex or batch."""
        usage = self.usage.setdefault((model, tier), Usage())
        usage.requests += 1
        usage.prompt_tokens += prompt_tokens
        usage.cached_tokens += cached_tokens
        usage.completion_tokens += completion_tokens

    def clear(self) -> None:
        self.usage.clear()

    def invoice(self, prices_spec: str) -> dict[str, Any]:
        """What GET /sim/bill answers: a line per model and tier, its usage and USD (None when
        the model has no price), the total over the priced lines, and the models unpriced."""
        prices = parse_prices(prices_spec)
        lines: list[dict[str, Any]] = []
        total = 0.0
        unpriced: set[str] = set()
        for (model, tier), usage in sorted(self.usage.items()):
            price = prices.get(model) or (prices.get(model.rpartition("/")[2]) if "/" in model else None)
            usd = None if price is None else usage.usd(price, TIER_SHARE[tier])
            if usd is None:
                unpriced.add(model)
            else:
                total += usd
            lines.append({"model": model, "tier": tier, **asdict(usage), "usd": usd})
        return {"usd": total, "lines": lines, "unpriced_models": sorted(unpriced)}
