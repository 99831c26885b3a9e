"""caching (issue 50): the cached prompt layout against the compact one, on the same filings and
the same model, against the simulator's prompt cache (OpenAI's rules: a prefix seen within the
time-to-live is served from 1,024 tokens, in steps of 128).

The example filings (`examples/filings`, scored against `examples/truth.json`) are run twice from
a cold simulator, once per layout (PIPELINE_PROMPT_LAYOUT), `--fresh`. Each run's calls, prompt,
cached and completion tokens come from its ledger (`llm_calls`), and are priced at the shipped
list prices of four models whose cached input is 50 %, 75 %, 90 % and 95 % off; the cost per
filing of each layout, their ratio, `pipeline eval`'s accuracy of each, and the cached tokens the
plan estimated at submit (`runs.estimate`) against those served are the result; and at each
price the layout PIPELINE_PROMPT_LAYOUT=auto (the default) takes, with its ratio (1.0 where it
takes the compact one). The simulator counts and caches the `json_schema` response_format as a
prefix to the messages, as OpenAI does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.core.cost import Price
from pipeline_dev.bench.regimes import BenchConfig, Result, run_pipeline

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODEL = "sim-1"
PRICED_AS = ("gpt-4o-mini", "gpt-4.1-mini", "gpt-5-mini", "gpt-6.1-sol")
"""Cached input at 50 %, 75 %, 90 % and 95 % off the input price (their shipped list prices)."""
HEADLINE_PRICE = "gpt-4.1-mini"
"""The price the runs' ledgers use, and the headline ratio's."""
LAYOUTS = ("compact", "cached")
SCORED = ("company_normalised", "fiscal_year", "revenue", "risk_recall", "risk_precision")


def caching(cfg: BenchConfig) -> Result:
    files = _files(cfg)
    env = {"PIPELINE_LLM_MODEL": MODEL, "PIPELINE_LLM_PRICES": ledger_prices()}
    runs = {
        layout: run_pipeline(
            cfg, files, cfg.latency_args(), env_extra={**env, "PIPELINE_PROMPT_LAYOUT": layout}
        )
        for layout in LAYOUTS
    }
    result = compare(cfg.database_url, {layout: run["run_id"] for layout, run in runs.items()}, files)
    lost = sum(r["lost"] for r in runs.values())
    return {
        **result,
        "wall_s": runs["cached"]["wall_s"],
        "compact_wall_s": runs["compact"]["wall_s"],
        "lost": lost,
        "goal": "auto's layout costs no more per filing than the compact one at every price, and less "
        "where it takes the cached one; accuracy not lower",
        "met": _auto_pays(result) and result["accuracy_not_lower"] and lost == 0,
    }


def _auto_pays(result: Result) -> bool:
    ratios = result["cost_ratio_by_price"]
    return all(
        ratios[name] is not None and ratios[name] < 1
        for name, layout in result["auto_layout_by_price"].items()
        if layout == "cached"
    )


def auto_layout(name: str) -> str:
    """The layout PIPELINE_PROMPT_LAYOUT=auto takes for a run of the model `name` (at its list
    prices): cached where its cached-input discount pays for the layout."""
    from pipeline.core.settings import Settings
    from pipeline.extraction.layout_choice import chosen

    return chosen(Settings(_env_file=None, llm_model=name)).layout


def ledger_prices() -> str:
    """PIPELINE_LLM_PRICES for the runs: the simulated model at HEADLINE_PRICE's list prices."""
    return f"{MODEL}:{_spec(_prices()[HEADLINE_PRICE])}"


def compare(database_url: str, run_ids: dict[str, str], files: Path) -> Result:
    """The runs of each layout (`run_ids`, of the filings in `files`) side by side: tokens, cost
    per filing at each price, their ratio (cached / compact), and the accuracy of each."""
    documents = len(list(files.iterdir()))
    measured = {
        layout: _measured(database_url, run_id, files, documents) for layout, run_id in run_ids.items()
    }
    cached, compact = measured["cached"], measured["compact"]
    ratios = {
        name: _ratio(cached["usd_per_filing"][name], compact["usd_per_filing"][name]) for name in PRICED_AS
    }
    auto = {name: auto_layout(name) for name in PRICED_AS}
    extract_ratios = {
        name: _ratio(cached["extract_usd_per_filing"][name], compact["extract_usd_per_filing"][name])
        for name in PRICED_AS
    }
    not_lower = all((cached["accuracy"].get(k) or 0) >= (compact["accuracy"].get(k) or 0) for k in SCORED)
    return {
        "documents": documents,
        "layouts": measured,
        "cost_ratio": ratios[HEADLINE_PRICE],
        "cost_ratio_by_price": ratios,
        "extract_cost_ratio_by_price": extract_ratios,
        "auto_layout_by_price": auto,
        "auto_cost_ratio_by_price": {
            name: ratios[name] if auto[name] == "cached" else 1.0 for name in PRICED_AS
        },
        "accuracy_not_lower": not_lower,
    }


def _files(cfg: BenchConfig) -> Path:
    """The example filings; at a small scale the smallest of them (a copy)."""
    import shutil

    every = sorted((EXAMPLES / "filings").iterdir(), key=lambda p: (p.stat().st_size, p.name))
    count = min(len(every), cfg.count(len(every)))
    if count == len(every):
        return EXAMPLES / "filings"
    directory = cfg.work_dir / "filings" / f"caching-{count}"
    if not directory.exists():
        directory.mkdir(parents=True)
        for path in every[:count]:
            shutil.copy(path, directory / path.name)
    return directory


def _prices() -> dict[str, Price]:
    from pipeline.core.prices import list_prices

    table = list_prices()
    return {name: table[name] for name in PRICED_AS}


def _spec(price: Price) -> str:
    cached = "" if price.cached_input_usd_per_m is None else f"/{price.cached_input_usd_per_m}"
    return f"{price.input_usd_per_m}/{price.output_usd_per_m}{cached}"


def _measured(database_url: str, run_id: str, files: Path, documents: int) -> dict[str, Any]:
    """The run's tokens by stage (from its ledger), its cost per filing at each price, and its
    accuracy on the filings' truth."""
    from sqlalchemy import func, select

    from pipeline.reporting.evaluate import evaluate, load_run, load_truth
    from pipeline.storage.db import get_engine, session_scope
    from pipeline.storage.models import LLMCall, Run

    engine = get_engine(database_url)
    with session_scope(engine) as session:
        rows = session.execute(
            select(
                LLMCall.stage,
                func.count(),
                func.coalesce(func.sum(LLMCall.prompt_tokens), 0),
                func.coalesce(func.sum(LLMCall.cached_tokens), 0),
                func.coalesce(func.sum(LLMCall.completion_tokens), 0),
                func.count().filter(LLMCall.cached_tokens > 0),
            )
            .where(LLMCall.run_id == run_id)
            .group_by(LLMCall.stage)
        ).all()
        ledger_usd, estimate = session.execute(
            select(Run.cost_usd, Run.estimate).where(Run.id == run_id)
        ).one()
    stages = {
        stage: {
            "calls": int(n),
            "prompt_tokens": int(p),
            "cached_tokens": int(c),
            "completion_tokens": int(o),
            "served_calls": int(h),
        }
        for stage, n, p, c, o, h in rows
    }
    prices = _prices()

    def usd(name: str, only: str | None = None, of: dict[str, dict[str, int]] = stages) -> float:
        price = prices[name]
        return sum(
            price.of(s["prompt_tokens"], s["completion_tokens"], s["cached_tokens"])
            for stage, s in of.items()
            if only is None or stage == only
        )

    named = {p.name for p in files.iterdir()}
    truth = [t for t in load_truth(EXAMPLES / "truth.json") if t.filename in named]
    overall = evaluate(truth, load_run(engine, run_id)).overall()
    extract = stages.get("extract", {})
    return {
        "run_id": run_id,
        "stages": stages,
        "cached_share_of_extract_prompt": _ratio(
            extract.get("cached_tokens", 0), extract.get("prompt_tokens", 0)
        ),
        "ledger_usd": ledger_usd,
        "estimated_cached_tokens": ((estimate or {}).get("modes", {}).get("sync") or {}).get("cached_tokens"),
        "usd_per_filing": {name: round(usd(name) / documents, 7) for name in PRICED_AS},
        "extract_usd_per_filing": {name: round(usd(name, "extract") / documents, 7) for name in PRICED_AS},
        "accuracy": {k: overall.get(k) for k in SCORED},
    }


def _ratio(part: float | None, whole: float | None) -> float | None:
    return round(part / whole, 4) if part is not None and whole else None
