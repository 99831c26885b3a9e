"""The report command's peak memory (issue 49): `pipeline report RUN --format html|md|csv` of a
run of N documents, each in a process of its own, measured by its high-water mark.

    PIPELINE_DATABASE_URL=postgresql://... python -m pipeline_dev.bench.report_page 500 20000

For each size, a scratch Postgres database (created on that URL's server, dropped afterwards)
gets one run seeded in SQL as `finalize_trace` seeds it (the growth regime's night: 4 extract
calls and a compression per document, three risk factors, failures, flags), its documents and
calls spread over the run's 40 minutes (so the page draws its timeline and latency charts),
and the report finalize would store (the answer a constant: no model). Each format is then
written by the CLI of the checkout this module runs from, in a child process; its peak is the
kernel's high-water mark of its resident set (`ru_maxrss` of that child, as VmHWM). Prints one
JSON line per size. To measure another version of the code, run this file from its checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pipeline_dev.bench.growth import seed
from pipeline_dev.bench.retention import scratch_database, vacuum

FORMATS = ("html", "md", "csv")
CHECKOUT = Path(__file__).resolve().parents[2]
"""The checkout whose CLI is measured: the one this module is run from."""
RUN_S = 2400
"""The seeded run's documents start over this many seconds (the night's 40 minutes)."""
SPREAD = (
    """update documents d set started_at = r.started_at + (d.id - f.first) * :step * interval '1 second',
        finished_at = r.started_at + ((d.id - f.first) * :step + 6 + d.id % 5) * interval '1 second'
    from runs r, (select min(id) as first from documents) f where r.id = d.run_id""",
    """update llm_calls c set created_at = d.started_at + (c.chunk_idx + 1) * interval '1.4 second',
        latency_ms = 700 + (c.id * 37) % 1300,
        limiter_wait_ms = case when c.id % 7 = 0 then 150 + c.id % 400 else 0 end,
        status = case when c.id % 61 = 0 then 'rate_limited' else c.status end
    from documents d where d.id = c.document_id""",
)


def seeded_run(url: str, documents: int) -> str:
    """The seeded run's id, its report stored as finalize stores it."""
    from sqlalchemy import text

    from pipeline.reporting import render, synthesize
    from pipeline.runs.status import run_status
    from pipeline.storage import reports
    from pipeline.storage.db import get_engine, session_scope

    engine = get_engine(url)
    seed(engine, "page-", 1, 1, documents)
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL statement_timeout = 0"))
        for statement in SPREAD:
            conn.execute(text(statement), {"step": RUN_S / documents} if ":step" in statement else {})
        run_id = str(conn.execute(text("select id from runs")).scalar_one())
    run, _ = synthesize._load(engine, run_id)
    report = synthesize._report_input(engine, run, "(answer)", run_status(engine, run_id))
    with session_scope(engine) as session:
        reports.amend_report(session, run_id, render.markdown(report), render.as_json(report))
    vacuum(url, full=False)
    return run_id


def peak(url: str, run_id: str, fmt: str, out: Path) -> dict[str, Any]:
    """`pipeline report RUN --format FMT -o OUT` in a child process: its peak MB, seconds, output KB."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIPELINE_")}
    env |= {"PIPELINE_DATABASE_URL": url, "PYTHONPATH": str(CHECKOUT)}
    argv = [sys.executable, "-m", "pipeline", "report", run_id, "--format", fmt, "-o", str(out)]
    started = time.perf_counter()
    child = subprocess.Popen(argv, env=env, cwd=CHECKOUT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        assert child.stderr is not None
        raise SystemExit(f"{' '.join(argv)}: exit {child.returncode}: {child.stderr.read().decode()[-2000:]}")
    return {
        "peak_mb": round(usage.ru_maxrss / 1024, 1),
        "s": round(time.perf_counter() - started, 2),
        "kb": round(out.stat().st_size / 1024, 1),
    }


def measure(url: str, documents: int) -> dict[str, Any]:
    with scratch_database(url) as scratch, tempfile.TemporaryDirectory() as work:
        run_id = seeded_run(scratch, documents)
        found = {fmt: peak(scratch, run_id, fmt, Path(work) / f"report.{fmt}") for fmt in FORMATS}
    return {"documents": documents, **found}


def main(argv: list[str]) -> None:
    url = os.environ.get("PIPELINE_DATABASE_URL", "")
    if not url.startswith("postgresql"):
        raise SystemExit("PIPELINE_DATABASE_URL: a postgresql:// URL (its server gets a scratch database)")
    for documents in [int(n) for n in argv] or [500, 20_000]:
        print(json.dumps(measure(url, documents)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
