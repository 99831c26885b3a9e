"""Real `pipeline worker --pool prefork` (and threads): the delivery tracking of issue 28, defect 5."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
import redis

from pipeline.recovery import deliveries
from pipeline.runtime import embedded
from pipeline_dev.synth_filings import write_filings
from tests.conftest import WORKER_READY_TIMEOUT_S, claimed_redis_db, eventually, run_cli

SETTLE_TIMEOUT_S = 30.0
"""Generous: the children's beats (every second with 3 s leases) drop what they handled."""


def received_sets(client: redis.Redis) -> dict[str, int]:
    """{owner: members} of every received set in the broker's database."""
    keys = [key.decode() for key in client.scan_iter(match=f"{deliveries.RECEIVED_PREFIX}*")]
    return {key.removeprefix(deliveries.RECEIVED_PREFIX): int(client.scard(key)) for key in keys}  # type: ignore[arg-type]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_workers_received_sets_hold_nothing_after_its_runs(
    pool: str, pipeline_env: dict[str, str], redis_base: str, tmp_path: Path
) -> None:
    """Issue 28, defect 5: under prefork, the parent notes each delivery as it arrives and a
    child runs its task, so the child's beats dropped what it handled from its own (empty) set
    and the parent's never shrank: 3, then 6 members after two 3-document runs. Under threads
    (as under solo) one process does both."""
    with claimed_redis_db(redis_base) as redis_url:  # a broker no other worker consumes
        env = {**pipeline_env, "PIPELINE_REDIS_URL": redis_url, "PIPELINE_LEASE_S": "3"}
        argv = [sys.executable, "-m", "pipeline", "worker", "--pool", pool, "--concurrency", "2"]
        name = f"{pool}-{uuid.uuid4().hex[:6]}@%h"
        worker = embedded.Child(
            f"{pool} worker",
            [*argv, "--name", name],
            env=embedded.child_env(env),
            log_path=tmp_path / "worker.log",
        )
        with worker:
            embedded.wait_until_ready([worker], WORKER_READY_TIMEOUT_S)
            for n in range(2):
                write_filings(tmp_path / f"run-{n}", 3, seed=n, sizes=[3000] * 3)
                submitted = run_cli("submit", str(tmp_path / f"run-{n}"), "--wait", env=env)
                assert submitted.returncode == 0, submitted.stderr
            client = redis.Redis.from_url(redis_url)
            eventually(
                "the received sets emptied",
                lambda: not any(received_sets(client).values()),
                SETTLE_TIMEOUT_S,
            )
            log = worker.log_path.read_text(errors="replace") if worker.log_path else ""
            assert "could not note the delivery" not in log
            client.close()
