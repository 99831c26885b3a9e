"""Running the benchmark: one private Redis, the chosen database, regimes in order."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline.runtime import embedded
from pipeline_dev.bench import procs
from pipeline_dev.bench.chart import bench_svg
from pipeline_dev.bench.regimes import REGIMES, BenchConfig
from pipeline_dev.bench.report import machine, markdown


def run_bench(
    regimes: Sequence[str],
    *,
    out_dir: Path,
    database_url: str | None,
    scale: float,
    window_s: float,
    rpm: int,
    tpm: int = 2_400_000,
    pacing: bool = True,
    p50_s: float = 1.42,
    p95_s: float = 3.81,
    workers: int = 2,
    concurrency: int = 32,
    finalize_sizes: Sequence[int] = (500, 20_000),
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run `regimes` (names from REGIMES, run in that table's order) and write
    `bench.json`, `bench.md` and the chart `bench.svg` into `out_dir`. Returns the results."""
    unknown = set(regimes) - set(REGIMES)
    if unknown:
        raise ValueError(f"unknown regimes: {', '.join(sorted(unknown))} (known: {', '.join(REGIMES)})")
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pipeline-bench-"))
    db = database_url or f"sqlite:///{work / 'bench.db'}"
    redis_child, redis_url = embedded.start_redis(work / "redis")
    with redis_child:
        cfg = BenchConfig(
            database_url=db,
            redis_url=redis_url,
            work_dir=work,
            scale=scale,
            window_s=window_s,
            rpm=rpm,
            tpm=tpm,
            pacing=pacing,
            p50_s=p50_s,
            p95_s=p95_s,
            workers=workers,
            concurrency=concurrency,
            finalize_sizes=tuple(finalize_sizes),
        )
        try:
            for name in (n for n in REGIMES if n in regimes):
                say(f"{name} ...")
                started = time.monotonic()
                cfg.results[name] = REGIMES[name](cfg)
                shown = {k: v for k, v in cfg.results[name].items() if k != "provider_timeline"}
                say(f"{name} done in {time.monotonic() - started:.0f} s: {json.dumps(shown)}")
        finally:
            procs.finish_stopping()  # while their Redis is still up
    meta = {
        "machine": machine(),
        "database": db.split(":", 1)[0],
        "scale": scale,
        "window_s": window_s,
        "rpm": rpm,
        "tpm": tpm,
        "pacing": pacing,
        "workers": workers,
        "concurrency": concurrency,
        "work_dir": str(work),
    }
    (out_dir / "bench.json").write_text(json.dumps({"meta": meta, "results": cfg.results}, indent=2))
    (out_dir / "bench.md").write_text(markdown(cfg.results, meta))
    svg = bench_svg(cfg.results)
    if svg is not None:
        (out_dir / "bench.svg").write_text(svg, encoding="utf-8")
    return cfg.results
