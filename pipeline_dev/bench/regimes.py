"""The benchmark's regimes, each run against the project's simulator on this machine."""

from __future__ import annotations

import json
import math
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipeline_dev.bench import procs
from pipeline_dev.bench.retention import r9_retention
from pipeline_dev.synth_filings import write_filings

Result = dict[str, Any]


@dataclass
class BenchConfig:
    """Sizes and provider settings; `scale` shrinks document counts (the harness test uses
    tiny ones), `window_s` the provider's window (tests use a short one)."""

    database_url: str
    redis_url: str
    work_dir: Path
    scale: float = 1.0
    rpm: int = 600
    tpm: int = 2_400_000
    """R1t's token quota: with chunks of ~6,000 tokens it binds before the requests do."""
    pacing: bool = True
    window_s: float = 60.0
    p50_s: float = 1.42
    p95_s: float = 3.81
    workers: int = 2
    concurrency: int = 32
    llm_timeout_s: float = 20.0
    seed: int = 7
    finalize_sizes: tuple[int, ...] = (500, 20_000)
    """The runs of the finalize regime, in documents (`--finalize-documents`; scaled too)."""
    results: dict[str, Result] = field(default_factory=dict)

    def count(self, full: int) -> int:
        return max(2, math.ceil(full * self.scale))

    def env(self, sim_url: str, **extra: str) -> dict[str, str]:
        return {
            "PIPELINE_DATABASE_URL": self.database_url,
            "PIPELINE_REDIS_URL": self.redis_url,
            "PIPELINE_LLM_BASE_URL": sim_url,
            "PIPELINE_LLM_MODEL": "sim-1",
            "PIPELINE_LLM_TIMEOUT_S": str(self.llm_timeout_s),
            "PIPELINE_DATA_DIR": str(self.work_dir),
            "PIPELINE_RATE_LIMIT_RPM": "0",
            "PIPELINE_RATE_LIMIT_WINDOW_S": str(self.window_s),
            "PIPELINE_RATE_LIMIT_PACING": str(self.pacing).lower(),
            **extra,
        }

    def latency_args(self) -> list[str]:
        return ["--p50", str(self.p50_s), "--p95", str(self.p95_s), "--seed", str(self.seed)]

    @property
    def r1t_rpm(self) -> int:
        """R1t's request quota, twice R1's: 2,000 tokens a request at the defaults, below what
        R1t's calls average (~4,800) though a third of them (compressions, last chunks) are
        small. At R1's 600 both quotas bind by turns: a run of small calls spends request time
        while token time idles, and pacing calls in the order they come does not reach the
        token minimum (docs/benchmarks.md, R1t, measures it)."""
        return 2 * self.rpm

    def limit_args(self) -> list[str]:
        return ["--rpm", str(self.rpm), "--window-s", str(self.window_s)]


R1_FILINGS = 600
"""About 4 minutes of quota at 600 RPM (~237 s). The run's fixed costs, ~2 s before the first
call and ~4-5 s of the report's chain after the last extraction call, are ~3 % of it."""

FAULT_ARGS = [
    "--error-rate",
    "0.03",
    "--drop-rate",
    "0.01",
    "--hang-rate",
    "0.005",
    "--bad-json-rate",
    "0.03",
]


def filings(cfg: BenchConfig, name: str, count: int, low: int, high: int) -> Path:
    directory = cfg.work_dir / "filings" / name
    if not directory.exists():
        rng = random.Random(cfg.seed)
        write_filings(directory, count, seed=cfg.seed, sizes=[rng.randint(low, high) for _ in range(count)])
    return directory


def r1_filings(cfg: BenchConfig) -> Path:
    """R1's filings, shared by the regimes compared with it (R1z, R2, R4, the peer)."""
    return filings(cfg, "r1", cfg.count(R1_FILINGS), 20_000, 80_000)


def run_pipeline(
    cfg: BenchConfig,
    files: Path,
    sim_args: list[str],
    *,
    workers: int | None = None,
    concurrency: int | None = None,
    env_extra: dict[str, str] | None = None,
    submit_args: Callable[[], list[str]] = list,
    fresh: bool = True,
) -> Result:
    """Submit `files` with --wait against a fresh simulator and workers; measure it.
    `submit_args` adds options to the submit, made just before it starts (a deadline);
    `fresh=False` lets the run reuse an earlier run's answers to the same chunks."""
    logs = Path(tempfile.mkdtemp(dir=cfg.work_dir, prefix="logs-"))
    with procs.simulator(logs, sim_args) as sim_url:
        # "{sim}" in a value: this simulator's URL (an escalation endpoint beside another LLM).
        env = cfg.env(sim_url, **{k: v.replace("{sim}", sim_url) for k, v in (env_extra or {}).items()})
        with procs.workers(env, logs, workers or cfg.workers, concurrency or cfg.concurrency) as children:
            measured = procs.run_measured(
                # 1: the run ended failed (too many failed documents): measured all the same.
                # --fresh: measure calls, not the reuse of an earlier run's answers.
                procs.pipeline_cli(
                    "submit", str(files), "--wait", *(["--fresh"] if fresh else []), *submit_args()
                ),
                env,
                timeout_s=3 * 3600,
                ok_codes=(0, 1),
            )
            worker_mb = [procs.peak_rss_mb(c.process.pid) for c in children]
            run_id = measured.out.strip().splitlines()[-1]
            wall, producer_mb = measured.wall_s, measured.peak_mb
        stats = procs.sim_stats(sim_url)
    documents, synthesis_levels = _outcome(cfg.database_url, run_id)
    status = {"documents": documents}
    final = sum(status["documents"].get(s, 0) for s in ("extracted", "failed", "skipped"))
    files_count = len(list(files.iterdir()))
    return {
        "run_id": run_id,
        "documents": files_count,
        "wall_s": round(wall, 2),
        "statuses": status["documents"],
        "lost": files_count - final,
        "extracted_share": status["documents"].get("extracted", 0) / files_count,
        "requests": stats["requests_total"],
        "admitted": stats["admitted"],
        "refused_429": stats["rejected_429"],
        "share_429": stats["rejected_429"] / max(1, stats["requests_total"]),
        "refused_per_second": stats["rejected_per_second"],
        "charged_tokens": stats["charged_tokens"],
        "provider_timeline": stats["timeline"],  # [admitted, tokens, refused] per second
        "llm_span_s": round(stats["admitted_span_s"], 2),
        "busy_requests_per_s": _per_s(stats["busy_admitted"], stats["busy_s"]),
        "busy_tokens_per_s": _per_s(stats["busy_charged_tokens"], stats["busy_s"]),
        "max_admitted_in_window": stats["max_admitted_in_any_60s_window"],
        "producer_peak_mb": producer_mb,
        "worker_peak_mb": max((m or 0.0) for m in worker_mb),
        "synthesis_levels": synthesis_levels,
        "flex_requests": stats.get("flex_requests", 0),
        "flex_unavailable": stats.get("flex_unavailable", 0),
        "batch_lines_answered": stats.get("batch_lines_answered", 0),
    }


def _outcome(database_url: str, run_id: str) -> tuple[dict[str, int], int | None]:
    """The run's documents by status and its report's synthesis levels, read from the database
    (in this process: two CLI processes per regime cost more than the tiny bench's runs)."""
    from sqlalchemy import select

    from pipeline.storage import run_state
    from pipeline.storage.db import get_engine, session_scope
    from pipeline.storage.models import Report

    with session_scope(get_engine(database_url)) as session:
        documents = run_state.status_counts(session, run_id)
        report = session.scalar(select(Report).where(Report.run_id == run_id))
        levels = report.json.get("synthesis_levels") if report is not None else None
    return documents, levels


def mean_latency_s(p50_s: float, p95_s: float) -> float:
    """Mean of the simulator's log-normal with that median and 95th percentile."""
    if p95_s <= p50_s:
        return p50_s
    sigma = math.log(p95_s / p50_s) / 1.6449
    return p50_s * math.exp(sigma**2 / 2)


def _per_s(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else 0.0


def _against_quota(
    cfg: BenchConfig, result: Result, *, tokens: bool, ratio: float, share_429: float
) -> Result:
    """The wall against the least time the provider's quota allows for what was admitted."""
    if tokens:
        result["theoretical_min_s"] = round(result["charged_tokens"] / cfg.tpm * cfg.window_s, 2)
        result["busy_quota_used"] = result["busy_tokens_per_s"] / (cfg.tpm / cfg.window_s)
    else:
        result["theoretical_min_s"] = round(result["admitted"] / cfg.rpm * cfg.window_s, 2)
        result["busy_quota_used"] = result["busy_requests_per_s"] / (cfg.rpm / cfg.window_s)
    result["ratio_to_min"] = result["wall_s"] / result["theoretical_min_s"]
    result["pacing"] = cfg.pacing
    result["goal"] = f"<= {ratio} x minimum, <= {share_429:.0%} 429, nothing lost"
    result["met"] = (
        result["ratio_to_min"] <= ratio and result["share_429"] <= share_429 and result["lost"] == 0
    )
    return result


def r1_rate_bound(cfg: BenchConfig) -> Result:
    """Request-bound: the configured RPM against a provider that enforces it per second too."""
    files = r1_filings(cfg)
    env = {"PIPELINE_RATE_LIMIT_RPM": str(cfg.rpm)}
    result = run_pipeline(cfg, files, cfg.latency_args() + cfg.limit_args(), env_extra=env)
    return _against_quota(cfg, result, tokens=False, ratio=1.05, share_429=0.01)


def r1t_token_bound(cfg: BenchConfig) -> Result:
    """Token-bound: chunks of ~6,000 tokens, a TPM that binds before the RPM."""
    files = filings(cfg, "r1t", cfg.count(400), 40_000, 80_000)
    env = {"PIPELINE_RATE_LIMIT_RPM": str(cfg.r1t_rpm), "PIPELINE_RATE_LIMIT_TPM": str(cfg.tpm)}
    limits = ["--rpm", str(cfg.r1t_rpm), "--tpm", str(cfg.tpm), "--window-s", str(cfg.window_s)]
    sim_args = [*cfg.latency_args(), *limits]
    result = run_pipeline(cfg, files, sim_args, env_extra=env)
    return _against_quota(cfg, result, tokens=True, ratio=1.05, share_429=0.01)


def r1z_learned(cfg: BenchConfig) -> Result:
    """Nothing configured: the limits are learned from the provider's x-ratelimit-* headers."""
    files = r1_filings(cfg)
    result = run_pipeline(cfg, files, cfg.latency_args() + cfg.limit_args())
    return _against_quota(cfg, result, tokens=False, ratio=1.25, share_429=0.03)


def r2_latency_bound(cfg: BenchConfig) -> Result:
    files = r1_filings(cfg)
    result = run_pipeline(cfg, files, cfg.latency_args())
    concurrency = cfg.workers * cfg.concurrency
    ideal = concurrency / mean_latency_s(cfg.p50_s, cfg.p95_s)
    result["throughput_rps"] = result["requests"] / result["wall_s"]
    result["ideal_rps"] = round(ideal, 2)
    result["ratio"] = result["throughput_rps"] / ideal
    result["goal"] = ">= 0.9"
    result["met"] = result["ratio"] >= 0.9
    return result


def r3_overhead(cfg: BenchConfig) -> Result:
    """The pipeline's own cost per document against a bare Celery chord of no-op tasks, and
    against a chord whose tasks make a document's two LLM calls and nothing else (the floor of
    any pipeline that makes them), with a provider that costs no CPU: the filings go twice
    through one simulator that keeps its answers (`--cache-answers`), and the second run is
    measured. CPU seconds are read from the processes (the workers' /proc before and after, the
    producer's wait4), not from the wall; the database and Redis figures are the servers' own
    counters over the measured run."""
    files = filings(cfg, "r3", cfg.count(400), 20_000, 24_000)
    n = len(list(files.iterdir()))
    logs = Path(tempfile.mkdtemp(dir=cfg.work_dir, prefix="logs-"))
    submit = procs.pipeline_cli("submit", str(files), "--wait", "--fresh")
    with procs.simulator_process(logs, ["--p50", "0", "--p95", "0", "--cache-answers"]) as (sim_url, sim):
        env = cfg.env(sim_url)
        with procs.workers(env, logs, cfg.workers, cfg.concurrency) as children:
            procs.run_measured(submit, env, 3600, ok_codes=(0, 1))  # fills the simulator's answers
            before = _counters(cfg, [c.process.pid for c in children], sim.process.pid)
            measured = procs.run_measured(submit, env, 3600, ok_codes=(0, 1))
            after = _counters(cfg, [c.process.pid for c in children], sim.process.pid)
        run_id = measured.out.strip().splitlines()[-1]
        procs.finish_stopping()  # the chords are measured on a machine the pipeline has left
        floors = _bare_chords(cfg, n, {"PIPELINE_REDIS_URL": cfg.redis_url, "PIPELINE_LLM_BASE_URL": sim_url})
    documents, _ = _outcome(cfg.database_url, run_id)
    used = {key: after[key] - before[key] for key in before}
    result: Result = {
        "run_id": run_id,
        "documents": n,
        "wall_s": round(measured.wall_s, 2),
        "statuses": documents,
        "lost": n - sum(documents.get(s, 0) for s in ("extracted", "failed", "skipped")),
        "worker_cpu_s": round(used["workers"], 2),
        "producer_cpu_s": round(measured.cpu_s, 2),
        "simulator_cpu_s": round(used["simulator"], 2),
        "cpu_s_per_1000_documents": round((used["workers"] + measured.cpu_s) / n * 1000, 1),
        "redis_commands_per_document": round(used["redis"] / n, 1),
        "db_transactions_per_document": round(used["db"] / n, 1) if used["db"] >= 0 else None,
        **floors,
    }
    result["pipeline_docs_per_s"] = n / measured.wall_s
    result["ratio"] = result["pipeline_docs_per_s"] / result["bare_chord_tasks_per_s"]
    result["ratio_to_calls_chord"] = result["pipeline_docs_per_s"] / result["calls_chord_tasks_per_s"]
    result["calls_chord_ratio"] = result["calls_chord_tasks_per_s"] / result["bare_chord_tasks_per_s"]
    result["cpu_ratio"] = result["bare_chord_cpu_s_per_1000_tasks"] / result["cpu_s_per_1000_documents"]
    result["goal"] = ">= 0.5"
    result["met"] = result["ratio"] >= 0.5
    return result


CHORD_TASKS_PER_DOCUMENT = 4
"""The chords have four tasks per document of the pipeline's run: 400 no-ops take half a
second, too short a time to measure a rate on a shared machine."""


def _bare_chords(cfg: BenchConfig, n: int, env: dict[str, str]) -> Result:
    """A chord of no-op tasks, and one of tasks that make a document's two LLM calls
    and nothing else (`workers.baseline`), on workers like the pipeline's: their wall, CPU
    (workers and sender) and Redis commands. The calls chord runs twice, the second measured,
    as the pipeline's run is. Walls are the sending command's, start-up to exit, as the
    pipeline's run is timed (until 2026-12-02 the chords were timed inside the sender, after its
    imports, which left out a second or so that the pipeline's figure carried)."""
    base_logs = Path(tempfile.mkdtemp(dir=cfg.work_dir, prefix="baseline-"))
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.baseline",
        "worker",
        "--pool=threads",
        "-Q",
        "baseline",
        "--without-gossip",
        "--without-mingle",
        "--loglevel=INFO",
    ]
    tasks = CHORD_TASKS_PER_DOCUMENT * n
    sender = [sys.executable, "-m", "workers.baseline", str(tasks)]
    found: Result = {}
    with procs.workers(env, base_logs, cfg.workers, cfg.concurrency, argv=argv) as base:
        pids = [c.process.pid for c in base]
        procs.run_measured([*sender, "--calls"], env, 3600)  # the simulator's answer, the clients
        for name, extra in (("bare_chord", []), ("calls_chord", ["--calls"])):
            before = _counters(cfg, pids, None)
            run = procs.run_measured([*sender, *extra], env, 3600)
            after = _counters(cfg, pids, None)
            # The command's own start to its exit, as the pipeline's `submit --wait` is timed
            # (its start-up included; the sender's is about a second on a slow machine).
            wall_s = run.wall_s
            assert int(json.loads(run.out)["tasks"]) == tasks
            found[f"{name}_cpu_s_per_1000_tasks"] = round(
                (after["workers"] - before["workers"] + run.cpu_s) / tasks * 1000, 1
            )
            found[f"{name}_redis_commands_per_task"] = round((after["redis"] - before["redis"]) / tasks, 1)
            found[f"{name}_tasks_per_s"] = tasks / wall_s
    return found


def _counters(cfg: BenchConfig, worker_pids: list[int], sim_pid: int | None) -> dict[str, float]:
    """CPU seconds of the workers and the simulator, Redis commands served, and (Postgres)
    transactions of the bench's database, so far."""
    import redis

    if cfg.database_url.startswith("postgresql"):
        time.sleep(1.0)  # Postgres publishes its statistics counters about once a second
    commands: dict[str, dict[str, int]] = redis.Redis.from_url(cfg.redis_url).info("commandstats")  # type: ignore[assignment]
    return {
        "workers": sum(procs.cpu_seconds(pid) for pid in worker_pids),
        "simulator": procs.cpu_seconds(sim_pid) if sim_pid else 0.0,
        "redis": float(sum(int(stats.get("calls", 0)) for stats in commands.values())),
        "db": float(_transactions(cfg.database_url)),
    }


def _transactions(database_url: str) -> int:
    """Transactions committed and rolled back in the database so far (-1: not Postgres)."""
    if not database_url.startswith("postgresql"):
        return -1
    from sqlalchemy import text

    from pipeline.storage.db import get_engine

    with get_engine(database_url).connect() as conn:
        conn.execute(text("select pg_stat_clear_snapshot()"))
        found = conn.execute(
            text(
                "select xact_commit + xact_rollback from pg_stat_database where datname = current_database()"
            )
        ).scalar()
    return int(found or 0)


def r4_faults(cfg: BenchConfig) -> Result:
    files = r1_filings(cfg)
    env = {"PIPELINE_RATE_LIMIT_RPM": str(cfg.rpm)}
    result = run_pipeline(cfg, files, cfg.latency_args() + cfg.limit_args() + FAULT_ARGS, env_extra=env)
    r1 = cfg.results.get("R1")
    result["wall_ratio_to_r1"] = result["wall_s"] / r1["wall_s"] if r1 else None
    result["goal"] = ">= 99.5% extracted, nothing lost, wall <= 1.3 x R1"
    result["met"] = (
        result["extracted_share"] >= 0.995
        and result["lost"] == 0
        and (result["wall_ratio_to_r1"] or 0) <= 1.3
    )
    return result


def r5_memory(cfg: BenchConfig) -> Result:
    files = filings(cfg, "r5", cfg.count(160), 20_000, 40_000)
    # Slow answers keep all 64 threads in flight: 2.0 s / 3.0 s at the bench's latencies, scaled
    # with them (the harness test's tiny latencies make it quick).
    slow = cfg.p50_s / 1.42
    latency = ["--p50", f"{2.0 * slow:.3f}", "--p95", f"{3.0 * slow:.3f}"]
    result = run_pipeline(cfg, files, latency, workers=1, concurrency=64)
    r6 = cfg.results.get("R6")
    result["producer_10k_peak_mb"] = r6["producer_peak_mb"] if r6 else None
    result["goal"] = "<= 250 MB per worker, <= 300 MB producer (10,000 documents)"
    result["met"] = result["worker_peak_mb"] <= 250 and (result["producer_10k_peak_mb"] or 0) <= 300
    return result


def r6_scale(cfg: BenchConfig) -> Result:
    files = filings(cfg, "r6", cfg.count(10_000), 20_000, 22_000)
    result = run_pipeline(cfg, files, ["--p50", "0", "--p95", "0"])
    result["ms_per_document"] = round(result["wall_s"] * 1000 / result["documents"], 2)
    result["goal"] = "completes, report within the context budget"
    result["met"] = result["lost"] == 0 and result["synthesis_levels"] >= 1
    return result


R8_FILINGS = 60
R8_UNGROUNDED_RATE = 0.05
R8_LARGE_BYTES = 5_000_000
R8_LARGE_EVERY = 30
"""One filing in 30 of R8's is 5 MB (two of 60); the others spread evenly on a log scale from
20 KB to 1 MB."""


def r8_sizes(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    large = [R8_LARGE_BYTES] * (count // R8_LARGE_EVERY)
    spread = [round(math.exp(rng.uniform(math.log(20_000), math.log(1_000_000)))) for _ in range(count)]
    return [*large, *spread][:count]


def r8_real_sizes(cfg: BenchConfig) -> Result:
    """Filings as they come: 20 KB to 1 MB (log-uniform) and two of 5 MB, against R1's
    provider (600 RPM, quantized). Wall against the quota minimum, peak worker memory, and
    the grounding of every document timed again in this process on its stored text."""
    files = cfg.work_dir / "filings" / "r8"
    if not files.exists():
        count = cfg.count(R8_FILINGS)
        write_filings(files, count, seed=cfg.seed, sizes=r8_sizes(count, cfg.seed))
    env = {"PIPELINE_RATE_LIMIT_RPM": str(cfg.rpm)}
    # Some quotes not in the filing, as models paraphrase: grounding then searches the whole text.
    sim = [*cfg.latency_args(), *cfg.limit_args(), "--ungrounded-rate", str(R8_UNGROUNDED_RATE)]
    result = run_pipeline(cfg, files, sim, env_extra=env)
    result = _against_quota(cfg, result, tokens=False, ratio=1.10, share_429=0.01)
    result.update(_grounding_times(cfg.database_url, result["run_id"]))
    result["bytes_max"] = max(p.stat().st_size for p in files.iterdir())
    result["goal"] = "nothing lost, worker peak <= 250 MB"
    result["met"] = result["lost"] == 0 and result["worker_peak_mb"] <= 250
    return result


def _grounding_times(database_url: str, run_id: str) -> dict[str, Any]:
    """Each extracted document's quotes grounded again against its text, timed: the largest
    time, and the time per MB of text."""
    from sqlalchemy import select

    from pipeline.extraction.grounding import Source, ground
    from pipeline.extraction.schemas import FilingExtraction
    from pipeline.storage.db import get_engine, session_scope
    from pipeline.storage.models import Content, Document, Extraction

    times: list[tuple[float, int]] = []
    with session_scope(get_engine(database_url)) as session:
        rows = session.execute(
            select(Extraction.data, Content.text)
            .join(Document, Document.id == Extraction.document_id)
            .join(Content, Content.sha256 == Document.sha256)
            .where(Extraction.run_id == run_id)
        ).all()
        for data, text in rows:
            started = time.perf_counter()
            ground(FilingExtraction.model_validate(data), Source(text))
            times.append((time.perf_counter() - started, len(text.encode())))
    if not times:
        return {"grounding_max_ms": None, "grounding_ms_per_mb": None}
    total_s, total_bytes = sum(t for t, _ in times), sum(b for _, b in times)
    return {
        "grounding_max_ms": round(max(t for t, _ in times) * 1000, 1),
        "grounding_ms_per_mb": round(total_s * 1000 / (total_bytes / 1e6), 1),
    }


R7_FILINGS = 200
R7_PRICES = "sim-1:0.15/0.60"
"""gpt-4o-mini's list prices (USD per million input/output tokens): what the costs are counted in."""
R7_BATCH_S = 40.0
"""How long the simulator's batches take when the batch is let finish."""
R7_SLOW_BATCH_S = 600.0
R7_DEADLINE_S = 150.0
"""The deadline run: a batch of 10 minutes against a deadline 150 s after the submit, which the
synchronous path alone meets (~90 s at 600 RPM): the run cuts over, keeps what the batch answered."""


def batch_env(cfg: BenchConfig) -> dict[str, str]:
    """The workers' settings of the regimes with batches (R7, R10): R1's quota, gpt-4o-mini's
    prices, and the batch path's poll, margin and cancel wait scaled with the window."""
    k = cfg.window_s / 60
    return {
        "PIPELINE_RATE_LIMIT_RPM": str(cfg.rpm),
        "PIPELINE_LLM_PRICES": R7_PRICES,
        "PIPELINE_BATCH_POLL_S": str(max(0.2, 1.0 * k)),
        "PIPELINE_BATCH_DEADLINE_MARGIN_S": str(10 * k),
        "PIPELINE_BATCH_CANCEL_WAIT_S": str(10 * k),
    }


def by_deadline(mode: str, seconds: float) -> Callable[[], list[str]]:
    """Submit options for `mode` with a deadline `seconds` after the submit starts."""

    def args() -> list[str]:
        return ["--mode", mode, "--deadline", (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()]

    return args


def r7_batch(cfg: BenchConfig) -> Result:
    """200 of R1's filings three times against R1's provider (600 RPM, quantized): synchronously
    (what R1 pays for them), in batch mode, and in batch mode with a deadline shorter than the
    batch takes."""
    files = cfg.work_dir / "filings" / "r7"
    if not files.exists():
        files.mkdir(parents=True)
        for path in sorted(r1_filings(cfg).iterdir())[: cfg.count(R7_FILINGS)]:
            shutil.copy(path, files / path.name)
    k = cfg.window_s / 60  # the harness test's short window shortens the batches and deadline
    env = batch_env(cfg)
    sim = cfg.latency_args() + cfg.limit_args()
    batch_s = R7_BATCH_S * k
    sync = run_pipeline(cfg, files, sim, env_extra=env)
    batch = run_pipeline(
        cfg,
        files,
        [*sim, "--batch-duration", str(batch_s)],
        env_extra=env,
        submit_args=lambda: ["--mode", "batch"],
    )
    deadline_s = R7_DEADLINE_S * k
    slow = [*sim, "--batch-duration", str(R7_SLOW_BATCH_S * k)]
    deadline = run_pipeline(cfg, files, slow, env_extra=env, submit_args=by_deadline("batch", deadline_s))
    costs = {
        name: run_costs(cfg.database_url, r["run_id"])
        for name, r in (("sync", sync), ("batch", batch), ("deadline", deadline))
    }
    result = {
        **batch,
        "sync_wall_s": sync["wall_s"],
        "sync_cost_usd": costs["sync"]["cost_usd"],
        "batch_cost_usd": costs["batch"]["cost_usd"],
        "cost_ratio": costs["batch"]["cost_usd"] / costs["sync"]["cost_usd"]
        if costs["sync"]["cost_usd"]
        else None,
        "batch_answers": costs["batch"]["batch"],
        "batch_sync_answers": costs["batch"]["sync"],
        "deadline_s": round(deadline_s, 1),
        "deadline_wall_s": deadline["wall_s"],
        "deadline_lost": deadline["lost"],
        "deadline_cost_usd": costs["deadline"]["cost_usd"],
        "deadline_batch_answers": costs["deadline"]["batch"],
        "deadline_sync_answers": costs["deadline"]["sync"],
        "lost": batch["lost"] + sync["lost"] + deadline["lost"],
    }
    result["goal"] = "cost <= 0.55 x sync, all extracted, deadline met"
    result["met"] = (
        result["cost_ratio"] is not None
        and result["cost_ratio"] <= 0.55
        and result["lost"] == 0
        and batch["extracted_share"] == 1.0
        and deadline["extracted_share"] == 1.0
        and deadline["wall_s"] <= deadline_s
    )
    return result


def run_costs(database_url: str, run_id: str) -> dict[str, Any]:
    """The run's cost, and its answered extraction calls by mode."""
    from sqlalchemy import func, select

    from pipeline.storage.db import get_engine, session_scope
    from pipeline.storage.models import LLMCall, Run

    with session_scope(get_engine(database_url)) as session:
        run = session.get(Run, run_id)
        modes = dict(
            list(
                session.execute(
                    select(LLMCall.mode, func.count())
                    .where(LLMCall.run_id == run_id, LLMCall.stage == "extract", LLMCall.status == "ok")
                    .group_by(LLMCall.mode)
                ).tuples()
            )
        )
        return {
            "cost_usd": run.cost_usd if run else 0.0,
            "batch": modes.get("batch", 0),
            "sync": modes.get("sync", 0),
        }


def r10_plan(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.planning import r10_plan as run

    return run(cfg)


def peer(cfg: BenchConfig, regime: str) -> Result:
    from pipeline_dev.bench.peer import run_peer

    files = sorted(r1_filings(cfg).iterdir())
    args = cfg.latency_args() + cfg.limit_args() + (FAULT_ARGS if regime == "R4" else [])
    logs = Path(tempfile.mkdtemp(dir=cfg.work_dir, prefix="peer-"))
    with procs.simulator(logs, args) as sim_url:
        outcome = run_peer(files, sim_url)
        stats = procs.sim_stats(sim_url)
    ours = cfg.results.get(regime)
    return {
        "documents": outcome.documents,
        "extracted": outcome.extracted,
        "lost": outcome.lost,
        "wall_s": round(outcome.wall_s, 2),
        "requests": stats["requests_total"],
        "share_429": stats["rejected_429"] / max(1, stats["requests_total"]),
        "text_share": outcome.text_share,
        "wall_ratio_ours_to_peer": ours["wall_s"] / outcome.wall_s if ours else None,
    }


def _intake(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.intake import intake

    return intake(cfg)


def _growth(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.growth import growth

    return growth(cfg)


def _finalize(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.finalize import finalize_memory

    return finalize_memory(cfg)


def _caching(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.caching import caching

    return caching(cfg)


def _caching_real(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.caching_real import caching_real

    return caching_real(cfg)


def _r11(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.trust import r11_trust

    return r11_trust(cfg)


def _submit(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.submit import submit_side_by_side

    return submit_side_by_side(cfg)


def _submit_alone(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.submit import submit_side_by_side

    return submit_side_by_side(cfg, alone=True)


def _submit_run(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.submit import submit_side_by_side

    return submit_side_by_side(cfg, until_finished=True)


REGIMES: dict[str, Callable[[BenchConfig], Result]] = {
    "R1": r1_rate_bound,
    "R1t": r1t_token_bound,
    "R1z": r1z_learned,
    "R2": r2_latency_bound,
    "R3": r3_overhead,
    "R4": r4_faults,
    "R6": r6_scale,
    "R5": r5_memory,
    "R7": r7_batch,
    "R8": r8_real_sizes,  # after R6: it reports R6's producer peak
    "R9": r9_retention,
    "R10": r10_plan,  # issue 32: estimates against actuals, the three-tier planner, an expired batch  # Postgres only: the database's size per 1,000 filings, before and after prune
    "R11": _r11,  # issue 33: calibration, escalation, a real model
    "caching": _caching,  # issue 50: the cached prompt layout against the compact one, cost and accuracy
    "caching-real": _caching_real,  # issue 50: both layouts against SmolLM2 on llama-cpp-python's server
    "growth": _growth,  # issue 49: each read path at 10k and 100k documents (Postgres only)
    "finalize": _finalize,  # issue 49: the synthesizing worker's peak at 500 and 20,000 documents
    "intake": _intake,  # issue 46: real filings' formats, no model: tokens, sections, speed, memory
    "peer-R1": lambda cfg: peer(cfg, "R1"),
    "peer-R4": lambda cfg: peer(cfg, "R4"),
    "submit": _submit,  # issue 49: the streaming submit against the submit of before, side by side
    "submit-alone": _submit_alone,  # the same, with no worker: the submit command by itself
    "submit-run": _submit_run,  # the same, each run waited for to its report: the operator's wait
}
