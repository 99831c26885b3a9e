"""Could a thread's release and its next acquire share one round trip? Measure how often a
release is followed by an acquire of the same thread, and how long after: what a fused script
would hold back the release (its refund, its in-flight slot, what the provider's headers said).

    .venv/bin/python -m tests.limiter_gaps --documents 40

The worker's own code extracts the documents (`extract_document` with the chunk pool, then
`compress_document`, as the extract task runs them) in this process, against the simulator with
limit headers (so every call goes through the scripts), a private Redis and a fresh database.
The limiter is the real one; a subclass only writes down when each call began and ended.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis

from pipeline.context import Context
from pipeline.core.settings import Settings
from pipeline.extraction.extract import extract_document
from pipeline.ingest.producer import prepare_run
from pipeline.llm.client import LLMClient
from pipeline.llm.ratelimit import Permit, RedisLimiter
from pipeline.llm.ratelimit.policy import ProviderLimits
from pipeline.recovery.heartbeat import scope_of
from pipeline.recovery.leases import Leases
from pipeline.reporting.compress import compress_document
from pipeline.runtime import embedded
from pipeline.storage.db import get_engine
from tests.roundtrips import fresh_database


class TimedLimiter(RedisLimiter):
    """The real limiter, noting (thread, what, began, ended) of each acquire and release."""

    events: list[tuple[int, str, float, float]]

    def acquire(self, *args: Any, **kwargs: Any) -> Permit:
        began = time.monotonic()
        permit = super().acquire(*args, **kwargs)
        self.events.append((threading.get_ident(), "acquire", began, time.monotonic()))
        return permit

    def release(
        self, permit: Permit, told: ProviderLimits | None, *args: Any, **kwargs: Any
    ) -> tuple[float, float]:
        began = time.monotonic()
        pushed = super().release(permit, told, *args, **kwargs)
        self.events.append((threading.get_ident(), "release", began, time.monotonic()))
        return pushed


def _ms(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def measure(documents: int, concurrency: int = 4, size: int = 25_000) -> dict[str, Any]:
    from pipeline_dev.synth_filings import write_filings

    with tempfile.TemporaryDirectory(prefix="pipeline-gaps-") as scratch, fresh_database() as database_url:
        root = Path(scratch)
        write_filings(root / "filings", documents, seed=73, sizes=[size] * documents)
        redis_child, redis_url = embedded.start_redis(root / "redis")
        sim_child, sim_url = embedded.start_simulator(
            embedded.child_env({}),
            root,
            ["--p50", "0.01", "--p95", "0.05", "--seed", "1", "--rpm", "1000000", "--tpm", "1000000000"],
        )
        with redis_child, sim_child:
            settings = Settings(  # type: ignore[call-arg]
                _env_file=None,
                database_url=database_url,
                redis_url=redis_url,
                llm_base_url=sim_url,
                llm_model="sim-1",
                chunk_tokens=4000,
                worker_concurrency=concurrency,
            )
            client: redis.Redis = redis.Redis.from_url(redis_url)
            base = RedisLimiter.from_settings(settings, 2 * concurrency)
            assert base is not None
            limiter = TimedLimiter(base.client, base.limits, lease_s=base.lease_ms / 1000)
            limiter.events = []
            engine = get_engine(database_url, pool_size=concurrency + 2)
            ctx = Context(
                settings=settings,
                engine=engine,
                llm=LLMClient(settings, pool_size=2 * concurrency, limiter=limiter),
                leases=Leases(settings.lease_s, scope=scope_of(client)),
                chunk_pool=ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="pipeline-chunk"),
            )
            plan = prepare_run(engine, settings, [str(root / "filings")], reuse_answers=False)

            def task(document_id: int) -> None:  # what the extract task runs
                extract_document(
                    ctx, document_id, before_done=lambda d, fence: compress_document(ctx, d, fence=fence)
                )

            # A warm-up document first: the probe, the structured-output mode, the token counters.
            task(plan.document_ids[0])
            limiter.events.clear()
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="task") as tasks:
                list(tasks.map(task, plan.document_ids[1:]))
            wall_s = time.monotonic() - started
            ctx.llm.close()
            assert ctx.chunk_pool is not None
            ctx.chunk_pool.shutdown()
            engine.dispose()
            client.close()
    by_thread: dict[int, list[tuple[str, float, float]]] = defaultdict(list)
    for ident, kind, began, ended in sorted(limiter.events, key=lambda e: e[2]):
        by_thread[ident].append((kind, began, ended))
    gaps, holds = [], []
    releases = followed = 0
    for sequence in by_thread.values():
        for (kind, _, ended), (next_kind, next_began, _) in itertools.pairwise(sequence):
            if kind == "release":
                if next_kind == "acquire":
                    followed += 1
                    gaps.append(next_began - ended)
            elif next_kind == "release":
                holds.append(next_began - ended)
        releases += sum(1 for kind, _, _ in sequence if kind == "release")
    return {
        "documents": documents - 1,
        "wall_s": round(wall_s, 1),
        "acquires": sum(1 for e in limiter.events if e[1] == "acquire"),
        "releases": releases,
        "releases_followed_by_an_acquire_of_the_same_thread": followed,
        "gap_release_to_next_acquire_ms": {
            "p10": _ms(gaps, 0.1),
            "p50": _ms(gaps, 0.5),
            "p90": _ms(gaps, 0.9),
        },
        "gap_mean_ms": round(statistics.fmean(gaps) * 1000, 1) if gaps else 0.0,
        "call_acquire_to_release_ms": {"p50": _ms(holds, 0.5), "p90": _ms(holds, 0.9)},
        "threads": len(by_thread),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=40)
    print(json.dumps(measure(parser.parse_args().documents), indent=2))


if __name__ == "__main__":
    main()
