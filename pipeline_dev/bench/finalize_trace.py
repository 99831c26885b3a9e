"""Finalize's steps traced in one process, on runs seeded in SQL: where its memory goes.

    PIPELINE_DATABASE_URL=postgresql://... python -m pipeline_dev.bench.finalize_trace 500 20000

For each size, a scratch Postgres database (created on that URL's server, dropped afterwards) gets
one run of that many documents, inserted as the growth regime inserts a night (extractions, three
risk factors each, failures, flags), and finalize's reads and renders run against it under
tracemalloc: the summaries the synthesis reads, the run's status, the documents the report lists,
its Markdown and JSON, and the documents CSV (to /dev/null). Prints one JSON line per size: each
step's traced memory (MB held after it, MB at its peak) and seconds, and the report's sizes. No
model is asked: the answer is a constant. Tracing slows Python down; the seconds are relative.
"""

from __future__ import annotations

import json
import os
import sys
import time
import tracemalloc
from typing import Any

from pipeline_dev.bench.growth import seed
from pipeline_dev.bench.retention import scratch_database


def trace(url: str, documents: int) -> dict[str, Any]:
    from sqlalchemy import text

    from pipeline.reporting import render, report_rows, synthesize
    from pipeline.runs.status import run_status
    from pipeline.storage.db import get_engine

    with scratch_database(url) as scratch:
        engine = get_engine(scratch)
        seed(engine, "trace-", 1, 1, documents)
        with engine.connect() as conn:
            run_id = str(conn.execute(text("select id from runs")).scalar_one())
        steps: dict[str, tuple[float, float, float]] = {}
        tracemalloc.start()
        started = time.perf_counter()

        def step(name: str) -> None:
            nonlocal started
            held, peak = tracemalloc.get_traced_memory()
            steps[name] = (
                round(held / 2**20, 1),
                round(peak / 2**20, 1),
                round(time.perf_counter() - started, 2),
            )
            tracemalloc.reset_peak()
            started = time.perf_counter()

        run, partials = synthesize._load(engine, run_id)
        summaries = sum(1 for _ in report_rows.summaries(engine, run_id, partials))
        step("summaries")
        view = run_status(engine, run_id)
        step("status")
        report = synthesize._report_input(engine, run, "(answer)", view)
        step("listing")
        markdown = render.markdown(report)
        step("markdown")
        data = json.dumps(render.as_json(report))
        step("json")
        with open(os.devnull, "w", encoding="utf-8") as out:
            rows = report_rows.write_csv(engine, run_id, out)
        step("csv")
        tracemalloc.stop()
    return {
        "documents": documents,
        "summaries": summaries,
        "csv_rows": rows,
        "markdown_kb": round(len(markdown.encode()) / 1024, 1),
        "json_kb": round(len(data.encode()) / 1024, 1),
        "steps_mb_held_peak_s": steps,
        "peak_mb": max(peak for _, peak, _ in steps.values()),
    }


def main(argv: list[str]) -> None:
    url = os.environ.get("PIPELINE_DATABASE_URL", "")
    if not url.startswith("postgresql"):
        raise SystemExit("PIPELINE_DATABASE_URL: a postgresql:// URL (its server gets a scratch database)")
    for documents in [int(n) for n in argv] or [500, 20_000]:
        print(json.dumps(trace(url, documents)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
