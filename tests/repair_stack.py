"""What the cancel and retry tests share: a simulator and a worker of their own (on a Redis
database of their own, so no other test's workers take their tasks), and the conditions they
wait for."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import Engine, func, select

from pipeline.core.constants import EXTRACT_QUEUE, REPORT_QUEUE
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Chunk, Document, LLMCall, Report, Run
from pipeline_dev.bench.procs import sim_configure, sim_stats
from tests.conftest import claimed_redis_db, run_cli, running_simulator, running_workers

WAIT_S = 30.0


@dataclass
class Stack:
    env: dict[str, str]
    sim: str
    redis_url: str
    engine: Engine

    def stats(self) -> dict[str, Any]:
        return sim_stats(self.sim)

    def configure(self, **values: Any) -> None:
        sim_configure(self.sim, **values)

    def submit(self, files: Path, *extra: str) -> str:
        result = run_cli("submit", str(files), "--fresh", *extra, env=self.env)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout.strip().splitlines()[-1]

    def idle(self) -> bool:
        """No task queued or under way (acknowledged late: a task being run is unacked), and no
        request in the simulator."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            queued = sum(
                int(client.llen(key))  # type: ignore[arg-type]
                for name in (EXTRACT_QUEUE, REPORT_QUEUE)
                for key in client.keys(f"{name}*")
                if client.type(key) == b"list"
            )
            running = int(client.hlen("unacked"))  # type: ignore[arg-type]
        finally:
            client.close()
        return queued == 0 and running == 0 and self.stats()["in_flight"] == 0


@contextmanager
def repair_stack(
    pipeline_env: dict[str, str], redis_base: str, logs: Path, *sim_args: str, concurrency: int = 4
) -> Iterator[Stack]:
    """A simulator (`sim_args`, refusing any key but the session's) and one worker of
    `concurrency` threads, polling batches every 0.3 s."""
    key = pipeline_env["PIPELINE_LLM_API_KEY"]
    with (
        claimed_redis_db(redis_base) as redis_url,
        running_simulator(logs, "--api-key", key, *sim_args) as sim,
    ):
        stack_env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_BASE_URL": sim,
            "PIPELINE_BATCH_POLL_S": "0.3",
            "PIPELINE_WORKER_CONCURRENCY": str(concurrency),
        }
        with running_workers(stack_env, logs, count=1, concurrency=concurrency):
            yield Stack(stack_env, sim, redis_url, get_engine(pipeline_env["PIPELINE_DATABASE_URL"]))


def statuses(engine: Engine, run_id: str) -> dict[str, int]:
    with session_scope(engine) as session:
        rows = session.execute(
            select(Document.status, func.count()).where(Document.run_id == run_id).group_by(Document.status)
        ).tuples()
        return {str(status): int(n) for status, n in rows}


def run_row(engine: Engine, run_id: str) -> Run:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        session.expunge(run)
        return run


def reports_of(engine: Engine, run_id: str) -> list[Report]:
    with session_scope(engine) as session:
        found = list(session.scalars(select(Report).where(Report.run_id == run_id)))
        session.expunge_all()
        return found


def calls_of(engine: Engine, run_id: str) -> list[LLMCall]:
    with session_scope(engine) as session:
        found = list(session.scalars(select(LLMCall).where(LLMCall.run_id == run_id).order_by(LLMCall.id)))
        session.expunge_all()
        return found


def answered_chunks(engine: Engine, run_id: str) -> int:
    with session_scope(engine) as session:
        return int(
            session.scalar(
                select(func.count(Chunk.id))
                .join(Document, Document.id == Chunk.document_id)
                .where(Document.run_id == run_id, Chunk.completed_at.is_not(None))
            )
            or 0
        )
