"""List prices of common models, shipped so that cost comes out of the box.

USD per million input/output/cached-input tokens at each provider's standard (synchronous) tier, for a
prompt under the long-context tier's threshold (Gemini 2.5 Pro and 1.5 charge more above 200k
and 128k prompt tokens: our chunks are a few thousand). Batch prices are the sync prices x
PIPELINE_LLM_BATCH_DISCOUNT (0.5: OpenAI's Batch API, Anthropic's Message Batches and Gemini's
Batch Mode are each documented at half price). PIPELINE_LLM_PRICES and PIPELINE_LLM_BATCH_PRICES
override a model's figures (a contract's prices, a gateway's, a model missing here).

The figures are copied from LiteLLM's price dataset (`model_prices_and_context_window_backup.json`
in the `litellm` wheel; LiteLLM is not a dependency), which cites each provider's pricing page:
current models from litellm 1.110.2, read on READ_ON; models that dataset no longer lists
(retired: Claude 3.x, Sonnet 4 / Opus 4, Gemini 1.5 and 2.0, o1-mini) from litellm 1.75.8.
To refresh: `pip download litellm --no-deps -d /tmp/l`, unzip that JSON, and copy each model's
`input_cost_per_token` and `output_cost_per_token` x 1e6 here; then update READ_ON.

The third figure is the cached-input price: a prompt token the provider served from its prompt
cache (OpenAI's `usage.prompt_tokens_details.cached_tokens`), the same datasets'
`cache_read_input_token_cost` x 1e6, read on CACHED_READ_ON (OpenAI's pricing page agrees: e.g.
gpt-4o-mini $0.15 in, $0.075 cached, $0.60 out; gpt-4.1 $2.00 / $0.50 / $8.00). A model listed
without one (gpt-4o-2024-05-13, gpt-4-turbo, gpt-3.5-turbo, Gemini 1.5: no cached price listed)
pays the input price for cached tokens, as a model with none configured does: the ledger never
claims a discount it does not know of. Anthropic's figure is a cache read (0.1x); its cache
writes (1.25x) are not modelled. Batch and flex prices discount it like the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pipeline.core.cost import Price, parse_prices

READ_ON = "2026-12-03"
"""When these figures were read (LiteLLM 1.110.2 was PyPI's newest)."""
CACHED_READ_ON = "2026-12-06"
"""When the cached-input prices were read (from LiteLLM 1.110.2 and 1.75.8, as the others)."""


@dataclass(frozen=True)
class Listing:
    """One provider's list prices and where they were read."""

    provider: str
    source_url: str
    batch_discount: float
    """Batch price / list price, as the provider documents it."""
    prices: str
    """`model:input/output[/cached],…` in USD per million tokens (PIPELINE_LLM_PRICES's format)."""

    def table(self) -> dict[str, Price]:
        return parse_prices(self.prices)


OPENAI = Listing(
    provider="OpenAI",
    source_url="https://developers.openai.com/api/docs/pricing",
    batch_discount=0.5,
    prices="""
        gpt-4o-mini:0.15/0.60/0.075, gpt-4o-mini-2024-07-18:0.15/0.60/0.075,
        gpt-4o:2.50/10.00/1.25, gpt-4o-2024-11-20:2.50/10.00/1.25, gpt-4o-2024-08-06:2.50/10.00/1.25,
        gpt-4o-2024-05-13:5.00/15.00,
        gpt-4.1:2.00/8.00/0.50, gpt-4.1-2025-04-14:2.00/8.00/0.50,
        gpt-4.1-mini:0.40/1.60/0.10, gpt-4.1-mini-2025-04-14:0.40/1.60/0.10,
        gpt-4.1-nano:0.10/0.40/0.025, gpt-4.1-nano-2025-04-14:0.10/0.40/0.025,
        o1:15.00/60.00/7.50, o1-mini:1.10/4.40/0.55, o3:2.00/8.00/0.50, o3-mini:1.10/4.40/0.55, o4-mini:1.10/4.40/0.275,
        gpt-4-turbo:10.00/30.00, gpt-3.5-turbo:0.50/1.50,
        gpt-5:1.25/10.00/0.125, gpt-5-mini:0.25/2.00/0.025, gpt-5-nano:0.05/0.40/0.005,
        gpt-5.1:1.25/10.00/0.125, gpt-5.2:1.75/14.00/0.175,
        gpt-5.4:2.50/15.00/0.25, gpt-5.4-mini:0.75/4.50/0.075, gpt-5.4-nano:0.20/1.25/0.02,
        gpt-5.5:5.00/30.00/0.50,
        gpt-6-sol:2.00/10.00/0.20, gpt-6-luna:0.10/0.50/0.01, gpt-6-astra:10.00/50.00/1.00,
        gpt-6.1-sol:2.00/10.00/0.10, gpt-6.1-terra:1.00/5.00/0.05
    """,
)

ANTHROPIC = Listing(
    provider="Anthropic",
    source_url="https://platform.claude.com/docs/en/about-claude/pricing",
    batch_discount=0.5,
    # claude-3-5-haiku-latest: the dated model's price (the 1.75.8 dataset's 1.00/5.00 for the
    # alias disagrees with its own dated entry and with Anthropic's $0.80/$4 for Haiku 3.5).
    prices="""
        claude-3-haiku-20240307:0.25/1.25/0.03, claude-3-opus-20240229:15.00/75.00/1.50,
        claude-3-5-haiku-20241022:0.80/4.00/0.08, claude-3-5-haiku-latest:0.80/4.00/0.08,
        claude-3-5-sonnet-20240620:3.00/15.00/0.30, claude-3-5-sonnet-20241022:3.00/15.00/0.30,
        claude-3-5-sonnet-latest:3.00/15.00/0.30,
        claude-3-7-sonnet-20250219:3.00/15.00/0.30, claude-3-7-sonnet-latest:3.00/15.00/0.30,
        claude-sonnet-4-20250514:3.00/15.00/0.30, claude-opus-4-20250514:15.00/75.00/1.50,
        claude-opus-4-1:15.00/75.00/1.50, claude-opus-4-1-20250805:15.00/75.00/1.50,
        claude-sonnet-4-5:3.00/15.00/0.30, claude-sonnet-4-5-20250929:3.00/15.00/0.30,
        claude-haiku-4-5:1.00/5.00/0.10, claude-haiku-4-5-20251001:1.00/5.00/0.10,
        claude-opus-4-5:5.00/25.00/0.50, claude-opus-4-5-20251101:5.00/25.00/0.50,
        claude-sonnet-4-6:3.00/15.00/0.30,
        claude-opus-4-6:5.00/25.00/0.50, claude-opus-4-6-20260205:5.00/25.00/0.50,
        claude-opus-4-7:5.00/25.00/0.50, claude-opus-4-7-20260416:5.00/25.00/0.50,
        claude-opus-4-8:5.00/25.00/0.50, claude-opus-5:5.00/25.00/0.50, claude-opus-5-5:4.00/20.00/0.20,
        claude-sonnet-5:2.00/10.00/0.20, claude-sonnet-5-5:2.00/10.00/0.10, claude-haiku-5-5:0.10/0.50/0.01
    """,
)

GEMINI = Listing(
    provider="Google (Gemini API)",
    source_url="https://ai.google.dev/gemini-api/docs/pricing",
    batch_discount=0.5,
    # The dataset's gemini/ entries (the Gemini API's prices), except gemini-1.5-pro: 1.25/5.00,
    # Google's price from October 2024 (its Vertex entry; the gemini/ one kept the earlier 3.50/10.50).
    prices="""
        gemini-1.5-flash:0.075/0.30, gemini-1.5-pro:1.25/5.00,
        gemini-2.0-flash:0.10/0.40/0.025, gemini-2.0-flash-001:0.10/0.40/0.025,
        gemini-2.0-flash-lite:0.075/0.30/0.01875,
        gemini-2.5-flash:0.30/2.50/0.03, gemini-2.5-flash-lite:0.10/0.40/0.01, gemini-2.5-pro:1.25/10.00/0.125,
        gemini-3-flash-preview:0.50/3.00/0.05, gemini-3.1-pro-preview:2.00/12.00/0.20,
        gemini-3.1-flash-lite:0.25/1.50/0.025,
        gemini-3.5-flash:1.50/9.00/0.15, gemini-3.5-flash-lite:0.30/2.50/0.03
    """,
)

LISTINGS = (OPENAI, ANTHROPIC, GEMINI)


def list_prices() -> dict[str, Price]:
    """Every shipped model's list price (USD per million input/output tokens): a new dict."""
    return dict(_parsed())


@cache
def _parsed() -> dict[str, Price]:
    table: dict[str, Price] = {}
    for listing in LISTINGS:
        table.update(listing.table())
    return table
