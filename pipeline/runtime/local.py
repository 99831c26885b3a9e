"""The parts `pipeline run` starts when nothing is configured, as one context manager."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console

from pipeline.core.settings import Settings, get_settings
from pipeline.runtime import embedded
from pipeline.storage.db import ensure_schema


@dataclass
class LocalParts:
    settings: Settings
    stack: embedded.Stack
    simulated: bool


@contextmanager
def local_stack(settings: Settings, worker_count: int, console: Console) -> Iterator[LocalParts]:
    """Start what is not configured (Redis, the simulator) and `worker_count` workers.

    The configured or started URLs are put in this process's environment, so that the
    Celery app imported afterwards and every child process see the same parts.
    """
    data_dir = settings.data_dir.resolve()
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    overrides = {
        "PIPELINE_DATA_DIR": str(data_dir),
        "PIPELINE_DATABASE_URL": settings.resolved_database_url,
    }
    with embedded.Stack() as stack:
        if not settings.redis_url:
            redis, overrides["PIPELINE_REDIS_URL"] = embedded.start_redis(data_dir / "redis")
            stack.add(redis)
            console.print(f"started embedded Redis at {overrides['PIPELINE_REDIS_URL']}")
        simulated = not settings.llm_base_url
        if simulated:
            sim, overrides["PIPELINE_LLM_BASE_URL"] = embedded.start_simulator(embedded.child_env({}), logs)
            stack.add(sim)
            console.print(
                "[bold yellow]No LLM endpoint configured: answers come from the built-in "
                f"SIMULATOR at {overrides['PIPELINE_LLM_BASE_URL']}; the run is marked simulated.[/]"
            )
        os.environ.update(overrides)
        get_settings.cache_clear()
        effective = get_settings()
        ensure_schema(effective.resolved_database_url)
        env = embedded.child_env({})
        workers = stack.group()
        for i in range(worker_count):
            workers.append(
                embedded.start_worker(
                    env, logs / f"worker-{i}.log", effective.worker_concurrency, f"local-{i}-{os.getpid()}@%h"
                )
            )
        console.print(f"started {worker_count} local workers (logs in {logs})")
        yield LocalParts(effective, stack, simulated)
