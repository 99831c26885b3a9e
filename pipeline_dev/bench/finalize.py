"""Finalize's memory (issue 49): runs of a small and a large number of documents, each measured
by the peak memory of the worker process that synthesized its report.

Each size is one `submit --wait --fresh` of generated filings of 4-30 KB (the issue's) against
a simulator with no latency and no limit, on the bench's workers (2 x 32 threads by default),
each run on fresh workers. The synthesizing worker is the one whose log says a
`pipeline.synthesize` task ended with the run's status; its peak is its `VmHWM` (the kernel's
high-water mark of its resident set: extraction, compressions, partial syntheses and the
report together), read before it stops. Beside it: the other workers' peaks, the report's stored
size (Markdown and JSON), and finalize's time (the report written after the last document ended).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline_dev.bench import procs

if TYPE_CHECKING:
    from pipeline_dev.bench.regimes import BenchConfig, Result

SIZES = (500, 20_000)
"""The documents of each run: the issue's smallest and largest (`--finalize-documents`)."""
LOW_BYTES, HIGH_BYTES = 4_000, 30_000
GOAL_RATIO = 1.2
SYNTHESIZED = re.compile(r"Task pipeline\.synthesize\[[^\]]+\] succeeded in [^:]+: '(completed|failed)'")


def finalize_memory(cfg: BenchConfig) -> Result:
    """Each size's run, and the largest's synthesizing worker's peak over the smallest's."""
    from pipeline_dev.bench.regimes import filings

    sizes = sorted({cfg.count(n) for n in cfg.finalize_sizes})
    runs: dict[str, Any] = {}
    for n in sizes:
        files = filings(cfg, f"finalize-{n}", n, LOW_BYTES, HIGH_BYTES)
        runs[str(n)] = _run(cfg, files)
    small, large = runs[str(sizes[0])], runs[str(sizes[-1])]
    ratio = (large["synthesizing_worker_peak_mb"] or 0.0) / (small["synthesizing_worker_peak_mb"] or 1.0)
    return {
        "documents": sizes[-1],
        "wall_s": large["wall_s"],
        "lost": sum(r["lost"] for r in runs.values()),
        "runs": runs,
        "peak_ratio": round(ratio, 3),
        "goal": f"synthesizing worker's peak at {sizes[-1]:,} documents <= {GOAL_RATIO} x at {sizes[0]:,}",
        "met": ratio <= GOAL_RATIO and all(r["lost"] == 0 for r in runs.values()),
    }


def _run(cfg: BenchConfig, files: Path) -> Result:
    logs = Path(tempfile.mkdtemp(dir=cfg.work_dir, prefix="logs-finalize-"))
    with procs.simulator(logs, ["--p50", "0", "--p95", "0"]) as sim_url:
        env = cfg.env(sim_url)
        with procs.workers(env, logs, cfg.workers, cfg.concurrency) as children:
            measured = procs.run_measured(
                procs.pipeline_cli("submit", str(files), "--wait", "--fresh"), env, 3 * 3600, ok_codes=(0, 1)
            )
            peaks = [procs.peak_rss_mb(c.process.pid) or 0.0 for c in children]
            synthesized = [
                i for i, c in enumerate(children) if c.log_path and SYNTHESIZED.search(c.log_path.read_text())
            ]
    run_id = measured.out.strip().splitlines()[-1]
    found = _report_figures(cfg.database_url, run_id)
    n = len(list(files.iterdir()))
    which = synthesized[0] if synthesized else None
    return {
        "run_id": run_id,
        "documents": n,
        "wall_s": round(measured.wall_s, 2),
        "statuses": found["statuses"],
        "lost": n - sum(found["statuses"].get(s, 0) for s in ("extracted", "failed", "skipped")),
        "synthesizing_worker_peak_mb": round(peaks[which], 1) if which is not None else None,
        "other_workers_peak_mb": [round(p, 1) for i, p in enumerate(peaks) if i != which],
        "producer_peak_mb": measured.peak_mb,
        "report_markdown_kb": found["markdown_kb"],
        "report_json_kb": found["json_kb"],
        "finalize_s": found["finalize_s"],
    }


def _report_figures(database_url: str, run_id: str) -> dict[str, Any]:
    """The run's documents by status, its stored report's size, and the seconds from its last
    document's end to its report."""
    import json

    from sqlalchemy import func, select

    from pipeline.storage import run_state
    from pipeline.storage.db import get_engine, session_scope
    from pipeline.storage.models import Document, Report, aware

    with session_scope(get_engine(database_url)) as session:
        statuses = run_state.status_counts(session, run_id)
        report = session.scalar(select(Report).where(Report.run_id == run_id))
        last = session.scalar(select(func.max(Document.finished_at)).where(Document.run_id == run_id))
        if report is None:
            return {"statuses": statuses, "markdown_kb": None, "json_kb": None, "finalize_s": None}
        return {
            "statuses": statuses,
            "markdown_kb": round(len(report.markdown.encode()) / 1024, 1),
            "json_kb": round(len(json.dumps(report.json).encode()) / 1024, 1),
            "finalize_s": round((aware(report.created_at) - aware(last)).total_seconds(), 2)
            if last
            else None,
        }
