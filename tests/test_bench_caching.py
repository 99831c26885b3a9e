"""The caching regime (`pipeline bench --regimes caching`, issue 50) at a tiny size, on the
session's workers and simulator: two of the example filings submitted once in each prompt
layout, then set side by side as the regime does (tokens from the ledger, cost per filing at
three models' prices, accuracy against the examples' truth). The regime's own runs (a cold
simulator and workers per layout, all 22 filings) are its numbers in docs/benchmarks.md."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline_dev.bench import caching
from pipeline_dev.bench.regimes import REGIMES
from tests.conftest import run_cli

pytestmark = pytest.mark.usefixtures("workers")


def test_the_caching_regime_sets_both_layouts_side_by_side(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    assert "caching" in REGIMES
    every = sorted((caching.EXAMPLES / "filings").iterdir(), key=lambda p: p.stat().st_size)
    for path in every[:2]:
        shutil.copy(path, tmp_path / path.name)
    run_ids = {}
    for layout in caching.LAYOUTS:
        env = {
            **pipeline_env,
            "PIPELINE_PROMPT_LAYOUT": layout,
            "PIPELINE_LLM_PRICES": caching.ledger_prices(),
        }
        submitted = run_cli("submit", "--wait", "--fresh", str(tmp_path), env=env)
        assert submitted.returncode == 0, submitted.stderr[-2000:]
        run_ids[layout] = submitted.stdout.strip().splitlines()[-1]

    result = caching.compare(pipeline_env["PIPELINE_DATABASE_URL"], run_ids, tmp_path)

    assert result["documents"] == 2
    cached, compact = result["layouts"]["cached"], result["layouts"]["compact"]
    # Each filing is two chunks: the later ones are served the instructions and the context.
    assert cached["stages"]["extract"]["cached_tokens"] >= 1_024
    assert cached["stages"]["extract"]["prompt_tokens"] > compact["stages"]["extract"]["prompt_tokens"]
    assert set(result["cost_ratio_by_price"]) == set(caching.PRICED_AS)
    assert all(ratio and ratio > 0 for ratio in result["cost_ratio_by_price"].values())
    assert cached["accuracy"]["fiscal_year"] == compact["accuracy"]["fiscal_year"] == 1.0
    assert isinstance(result["accuracy_not_lower"], bool)
