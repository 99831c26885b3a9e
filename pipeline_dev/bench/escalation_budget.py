"""What a run's budget spends with escalation (issue 47, item 6): the same filings, a small
model the simulator makes err and a strong one it answers faithfully, escalated to on its own
endpoint (PIPELINE_ESCALATE_BASE_URL, here the same simulator) and through the main one. Reports
each run's recorded cost, by stage, against PIPELINE_RUN_BUDGET_USD.

    .venv/bin/python -m pipeline_dev.bench.escalation_budget --runs 2

Needs a Postgres server (--server, default the local one) where it creates a scratch database,
dropped at the end; starts its own Redis, simulator and worker."""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from pipeline.runtime import embedded
from pipeline.storage.db import upgrade
from pipeline_dev.bench.regimes import BenchConfig, run_pipeline
from pipeline_dev.synth_filings import write_filings

SMALL, STRONG = "small-1", "strong-1"
PRICES = f"{SMALL}:0.15/0.60,{STRONG}:2.50/10.00"
"""gpt-4o-mini's and gpt-4o's list prices, USD per million tokens in/out."""
ADVERSARIAL = ["--ungrounded-rate", "0.1", "--wrong-figure-rate", "0.2", "--made-up-rate", "0.2"]
SERVER = "postgresql://postgres@127.0.0.1:5432/test"


@contextmanager
def scratch_database(server: str) -> Iterator[str]:
    """A new database on `server`, dropped at the end; its SQLAlchemy URL."""
    name = f"escalation_budget_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
    finally:
        from pipeline.storage.db import dispose_engines

        dispose_engines()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _spent(url: str, run_id: str) -> dict[str, Any]:
    with psycopg.connect(url.replace("+psycopg", "")) as conn:
        cost, status = conn.execute(
            "select cost_usd, status from runs where id = %s", (run_id,)
        ).fetchone() or (
            None,
            None,
        )
        stages = conn.execute(
            "select stage, count(*), coalesce(sum(cost_usd), 0) from llm_calls where run_id = %s group by stage",
            (run_id,),
        ).fetchall()
    return {
        "cost_usd": round(float(cost or 0), 4),
        "run_status": status,
        "by_stage": {stage: {"calls": int(n), "usd": round(float(usd), 4)} for stage, n, usd in stages},
    }


def measure(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    work = Path(tempfile.mkdtemp(prefix="escalation-budget-"))
    with scratch_database(args.server) as url:
        upgrade(url)
        redis, redis_url = embedded.start_redis(work / "redis")
        with redis:
            files = work / "filings"
            files.mkdir()
            write_filings(files, args.filings, seed=11)
            cfg = BenchConfig(
                database_url=url,
                redis_url=redis_url,
                work_dir=work,
                p50_s=0.3,
                p95_s=0.8,
                workers=1,
                concurrency=args.threads,
            )
            sim = [*cfg.latency_args(), *ADVERSARIAL, "--faithful-model", STRONG]
            env = {
                "PIPELINE_LLM_MODEL": SMALL,
                "PIPELINE_LLM_PRICES": PRICES,
                "PIPELINE_ESCALATE_MODEL": STRONG,
                "PIPELINE_RUN_BUDGET_USD": str(args.budget),
            }
            ways = {"own endpoint": {"PIPELINE_ESCALATE_BASE_URL": "{sim}"}, "main endpoint": {}}
            for way, extra in ways.items():
                for _ in range(args.runs):
                    run = run_pipeline(cfg, files, sim, env_extra={**env, **extra})
                    found.setdefault(way, []).append(
                        {**_spent(url, run["run_id"]), "documents": run["statuses"]}
                    )
                    print(way, json.dumps(found[way][-1]), flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each way")
    parser.add_argument("--filings", type=int, default=40)
    parser.add_argument("--threads", type=int, default=8, help="the worker's concurrency")
    parser.add_argument("--budget", type=float, default=0.05, help="PIPELINE_RUN_BUDGET_USD")
    parser.add_argument("--server", default=SERVER, help="a Postgres server to make a scratch database on")
    print(json.dumps(measure(parser.parse_args()), indent=2))


if __name__ == "__main__":
    main()
