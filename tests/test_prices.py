"""The shipped list prices: common models are priced out of the box, settings override them per
model, and batch prices follow the providers' documented discount. A real run priced by this
table: tests/test_readme_sql.py (`pipeline run` on the simulator with the default model)."""

from __future__ import annotations

import os
from datetime import date
from urllib.parse import urlsplit

import pytest

from pipeline.core import prices
from pipeline.core.cost import Price, call_cost
from pipeline.core.settings import Settings, default

COMMON_MODELS = {
    "OpenAI": ["gpt-4o-mini", "gpt-4o", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "o3-mini", "o4-mini"],
    "Anthropic": [
        "claude-3-5-sonnet-20241022",
        "claude-3-7-sonnet-20250219",
        "claude-3-5-haiku-20241022",
        "claude-sonnet-4-20250514",
        "claude-opus-4-20250514",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
    ],
    "Google (Gemini API)": [
        "gemini-1.5-flash",
        "gemini-1.5-pro",
        "gemini-2.0-flash",
        "gemini-2.5-flash",
        "gemini-2.5-pro",
    ],
}


@pytest.fixture(autouse=True)
def _nothing_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's other tests set PIPELINE_* in this process's environment (`pipeline_env`)."""
    for name in [name for name in os.environ if name.startswith("PIPELINE_")]:
        monkeypatch.delenv(name)


def _settings(**values: object) -> Settings:
    """Settings with no price configured but `values` (the environment's ignored)."""
    return Settings(_env_file=None, **{"llm_prices": None, "llm_batch_prices": None, **values})  # type: ignore[arg-type]


def test_each_provider_lists_its_common_models_with_where_and_when_they_were_read() -> None:
    date.fromisoformat(prices.READ_ON)
    by_provider = {listing.provider: listing for listing in prices.LISTINGS}
    for provider, models in COMMON_MODELS.items():
        listing = by_provider[provider]
        assert urlsplit(listing.source_url).scheme == "https", provider
        table = listing.table()
        for model in models:
            assert model in table, f"{provider} lists no {model}"
            price = table[model]
            assert 0 < price.input_usd_per_m <= price.output_usd_per_m, model
            assert 0 < price.cached_usd_per_m <= price.input_usd_per_m, model


def test_the_default_model_has_its_list_price_with_nothing_configured() -> None:
    settings = _settings()
    assert settings.llm_model == default("llm_model")
    assert settings.prices()[default("llm_model")] == Price(0.15, 0.60, 0.075)
    # 1M prompt tokens and 100k completion tokens of gpt-4o-mini: $0.15 + $0.06.
    assert call_cost(settings.prices(), default("llm_model"), 1_000_000, 100_000) == pytest.approx(0.21)


def test_a_model_name_is_unique_across_providers() -> None:
    seen: dict[str, str] = {}
    for listing in prices.LISTINGS:
        for model in listing.table():
            assert model not in seen, f"{model} in {seen.get(model)} and {listing.provider}"
            seen[model] = listing.provider


def test_the_setting_overrides_a_shipped_price_per_model_and_adds_others() -> None:
    settings = _settings(llm_prices="gpt-4o-mini:0.10/0.40,sim-1:1/2")
    table = settings.prices()
    assert table["gpt-4o-mini"] == Price(0.10, 0.40)  # a contract's price wins
    assert table["sim-1"] == Price(1.0, 2.0)
    assert table["gpt-4o"] == Price(2.50, 10.00, 1.25)  # the others keep their list prices
    assert "sim-1" not in _settings().prices()  # the simulator's model has no list price


def test_batch_prices_are_half_unless_set_per_model() -> None:
    assert all(listing.batch_discount == 0.5 for listing in prices.LISTINGS)
    assert Settings.model_fields["llm_batch_discount"].default == 0.5  # what the providers document
    settings = _settings(llm_batch_prices="gpt-4o:1/4")
    batch = settings.batch_prices()
    assert batch["gpt-4o"] == Price(1.0, 4.0)
    assert batch["gpt-4o-mini"] == Price(0.075, 0.30, 0.0375)  # setting one keeps the others
    contract = _settings(llm_batch_discount=0.6).batch_prices()["gpt-4.1"]
    assert (contract.input_usd_per_m, contract.output_usd_per_m) == pytest.approx((1.2, 4.8))


def test_a_gateways_provider_prefix_finds_the_models_price() -> None:
    table = _settings().prices()
    assert call_cost(table, "openai/gpt-4o-mini", 1_000_000, 0) == pytest.approx(0.15)
    assert call_cost(table, "models/gemini-2.5-flash", 0, 1_000_000) == pytest.approx(2.50)
    assert call_cost(table, "vendor/no-such-model", 10, 10) is None
    # A price set for the prefixed name is the one used.
    own = _settings(llm_prices="openai/gpt-4o-mini:1/1").prices()
    assert call_cost(own, "openai/gpt-4o-mini", 1_000_000, 0) == pytest.approx(1.0)


OPENAI_CACHED = {  # OpenAI's pricing page: input / cached input / output, USD per million tokens
    "gpt-4o-mini": (0.15, 0.075, 0.60),
    "gpt-4o": (2.50, 1.25, 10.00),
    "gpt-4.1": (2.00, 0.50, 8.00),
    "gpt-4.1-mini": (0.40, 0.10, 1.60),
    "gpt-4.1-nano": (0.10, 0.025, 0.40),
    "o3": (2.00, 0.50, 8.00),
    "o4-mini": (1.10, 0.275, 4.40),
}


def test_cached_input_has_its_own_list_price_and_costs_the_input_price_where_none_is_known() -> None:
    table = _settings().prices()
    for model, (input_usd, cached_usd, output_usd) in OPENAI_CACHED.items():
        assert table[model] == Price(input_usd, output_usd, cached_usd), model
    # gpt-4o-mini: 1M prompt tokens of which 600k cached, 100k completion: 0.4 x 0.15 + 0.6 x 0.075 + 0.06.
    assert call_cost(table, "gpt-4o-mini", 1_000_000, 100_000, 600_000) == pytest.approx(0.165)
    assert table["gpt-4-turbo"].cached_input_usd_per_m is None, "no cached price listed: no discount"
    assert call_cost(table, "gpt-4-turbo", 1_000_000, 0, 1_000_000) == pytest.approx(10.0)


def test_the_setting_takes_a_cached_price_as_a_third_figure_and_the_batch_halves_it() -> None:
    settings = _settings(llm_prices="sim-1:1000/2000/250,other:1/2")
    assert settings.prices()["sim-1"] == Price(1000, 2000, 250)
    assert settings.prices()["other"] == Price(1, 2), "the old form is still valid"
    assert settings.batch_prices()["sim-1"] == Price(500, 1000, 125)
    assert settings.batch_prices()["other"].cached_usd_per_m == 0.5, "no cached price: the input's"


@pytest.mark.parametrize("bad", ["m:1/2/3/4", "m:1/2/x", "m:1//2", "m:1/2/-1"])
def test_a_malformed_price_names_its_setting(bad: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="PIPELINE_LLM_PRICES"):
        _settings(llm_prices=bad)
    with pytest.raises(ValidationError, match="PIPELINE_LLM_BATCH_PRICES"):
        _settings(llm_batch_prices=bad)
