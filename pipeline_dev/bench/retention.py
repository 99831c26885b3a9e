"""R9: the database's size per filing, before and after `pipeline prune`, on Postgres.

A run of filings as the product takes them (20 KB to 1 MB, log-uniform) goes through the
pipeline into a scratch database of its own on the bench's Postgres server (created, then
dropped), so that every byte measured is that run's. The tables are measured
(`pg_total_relation_size`: heap, TOAST and indexes) three times: as the run left them; compacted
(VACUUM FULL, which only a scratch database can afford: it is what the rows occupy once their
dead versions are gone, the size a long-lived database settles at); and compacted again after
the run was aged past the retention and pruned. Plain VACUUM after the prune is measured too: the
files keep their size, the space is reused by the nights that follow.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from pipeline_dev.synth_filings import write_filings

if TYPE_CHECKING:
    from pipeline_dev.bench.regimes import BenchConfig, Result

R9_FILINGS = 1000
R9_LOW_BYTES, R9_HIGH_BYTES = 20_000, 1_000_000
TABLES = (
    "contents",
    "documents",
    "chunks",
    "llm_calls",
    "extractions",
    "risk_factors",
    "reports",
    "runs",
    "synthesis_partials",
    "llm_batches",
    "document_attempts",
)
RETENTION_DAYS = 90


def r9_sizes(count: int, seed: int) -> list[int]:
    """The product's range, log-uniform (mean about 250 KB)."""
    rng = random.Random(seed)
    low, high = math.log(R9_LOW_BYTES), math.log(R9_HIGH_BYTES)
    return [round(math.exp(rng.uniform(low, high))) for _ in range(count)]


def r9_retention(cfg: BenchConfig) -> Result:
    from pipeline_dev.bench.regimes import run_pipeline

    if not cfg.database_url.startswith("postgresql"):
        return {
            "skipped": "R9 measures Postgres: set PIPELINE_DATABASE_URL to a server it may create a database on"
        }
    files = cfg.work_dir / "filings" / "r9"
    count = cfg.count(R9_FILINGS)
    if not files.exists():
        write_filings(files, count, seed=cfg.seed, sizes=r9_sizes(count, cfg.seed))
    text_bytes = sum(p.stat().st_size for p in files.iterdir())
    with scratch_database(cfg.database_url) as url:
        # Fast answers, no quota: R9 measures bytes, not time.
        sim = ["--p50", "0.05", "--p95", "0.2", "--seed", str(cfg.seed)]
        run = run_pipeline(
            replace(cfg, database_url=url), files, sim, env_extra={"PIPELINE_RATE_LIMIT_RPM": "0"}
        )
        written = table_sizes(url)
        vacuum(url, full=True)
        kept = table_sizes(url)
        started = time.monotonic()
        pruned = age_and_prune(url, run["run_id"])
        prune_s = time.monotonic() - started
        vacuum(url, full=False)
        reusable = table_sizes(url)
        vacuum(url, full=True)
        after = table_sizes(url)
    per_1000 = 1000 / count
    return {
        "run_id": run["run_id"],
        "documents": count,
        "extracted": run["statuses"].get("extracted", 0),
        "wall_s": run["wall_s"],
        "lost": run["lost"],
        "filing_mb": round(text_bytes / 1e6, 1),
        "sizes": f"{R9_LOW_BYTES // 1000} KB to {R9_HIGH_BYTES // 1_000_000} MB, log-uniform",
        "calls": run["requests"],
        "mb_per_1000_written": round(written["total"] * per_1000 / 1e6, 1),
        "mb_per_1000_kept": round(kept["total"] * per_1000 / 1e6, 1),
        "mb_per_1000_pruned": round(after["total"] * per_1000 / 1e6, 1),
        "mb_per_1000_pruned_files": round(reusable["total"] * per_1000 / 1e6, 1),
        "prune_reported_mb": round(pruned / 1e6, 1),
        "prune_s": round(prune_s, 2),
        "tables_written": written,
        "tables_kept": kept,
        "tables_pruned": after,
        "goal": "measured, no goal",
        "met": None,
    }


@contextmanager
def scratch_database(url: str) -> Iterator[str]:
    """A new database on `url`'s server, migrated; dropped afterwards."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from pipeline.storage.db import dispose_engines, upgrade

    name = f"pipeline_r9_{uuid.uuid4().hex[:10]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    scratch = make_url(url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(scratch)
        yield scratch
    finally:
        dispose_engines()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def table_sizes(url: str) -> dict[str, int]:
    """Bytes of each table with its TOAST and indexes, and their sum ("total")."""
    from sqlalchemy import text

    from pipeline.storage.db import get_engine

    with get_engine(url).connect() as conn:
        sizes = {
            table: int(conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": table}).scalar_one())
            for table in TABLES
        }
    sizes["total"] = sum(sizes.values())  # not pg_database_size: an empty database's catalog is 7 MB
    return sizes


def vacuum(url: str, *, full: bool) -> None:
    from sqlalchemy import text

    from pipeline.storage.db import get_engine

    with get_engine(url).connect() as conn:
        auto = conn.execution_options(isolation_level="AUTOCOMMIT")
        auto.execute(text("SET statement_timeout = 0"))
        auto.execute(text("VACUUM (FULL, ANALYZE)" if full else "VACUUM (ANALYZE)"))


def age_and_prune(url: str, run_id: str) -> int:
    """The run made older than the retention, then pruned as beat would: the bytes it says it
    deleted."""
    from sqlalchemy import update

    from pipeline.runs.retention import prune_runs
    from pipeline.storage.db import get_engine, session_scope
    from pipeline.storage.models import Run

    engine = get_engine(url)
    back = timedelta(days=RETENTION_DAYS + 1)
    with session_scope(engine) as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(created_at=Run.created_at - back, finished_at=Run.finished_at - back)
        )
    outcome = prune_runs(engine, RETENTION_DAYS * 86_400)
    return outcome.total.bytes
