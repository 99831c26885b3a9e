"""The nightly inbox and beat: only new content is submitted; beat sends the watchdog."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from celery.schedules import crontab
from sqlalchemy import select

from pipeline.core.constants import REPORT_QUEUE
from pipeline.core.settings import Settings
from pipeline.runtime.embedded import Child, child_env
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import claimed_redis_db, run_cli, running_workers
from workers.app import beat_schedule


def test_the_beat_schedule_has_the_watchdog_and_the_inbox_only_when_one_is_set() -> None:
    plain = beat_schedule(Settings(_env_file=None))  # type: ignore[call-arg]
    assert set(plain) == {"watchdog"} and plain["watchdog"]["task"] == "pipeline.watchdog"
    nightly = beat_schedule(Settings(_env_file=None, inbox="/data/inbox", inbox_schedule="15 2 * * 1-5"))  # type: ignore[call-arg]
    assert nightly["nightly"]["task"] == "pipeline.nightly"
    assert nightly["nightly"]["schedule"] == crontab(minute="15", hour="2", day_of_week="1-5")


def test_a_schedule_that_is_not_a_crontab_expression_is_refused() -> None:
    with pytest.raises(ValueError, match="crontab expression of five fields"):
        Settings(_env_file=None, inbox_schedule="nightly")  # type: ignore[call-arg]


def test_submit_new_only_leaves_out_what_an_earlier_run_extracted(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path: Path
) -> None:
    write_filings(tmp_path, 2, seed=71, sizes=[21_000] * 2)
    first = run_cli("submit", str(tmp_path), "--new-only", "--wait", env=pipeline_env)
    assert first.returncode == 0, first.stderr
    again = run_cli("submit", str(tmp_path), "--new-only", env=pipeline_env)
    assert again.returncode == 0, again.stderr
    assert "nothing new to submit" in again.stderr and again.stdout.strip() == ""
    assert "2 files left out" in again.stderr
    (tmp_path / "new.txt").write_text("Item 7. Revenue was $12 million in fiscal 2024.\n" * 200)
    third = run_cli("submit", str(tmp_path), "--new-only", env=pipeline_env)
    assert third.returncode == 0, third.stderr
    run_id = third.stdout.strip().splitlines()[-1]
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        paths = list(session.scalars(select(Document.path).where(Document.run_id == run_id)))
    assert [Path(p).name for p in paths] == ["new.txt"]


@pytest.fixture(scope="module")
def scheduled(
    pipeline_env: dict[str, str], redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], Path, Path]]:
    """A worker that knows an inbox, and `pipeline beat` sending the watchdog every second."""
    logs = tmp_path_factory.mktemp("beat")
    inbox = tmp_path_factory.mktemp("inbox")
    with claimed_redis_db(redis_base) as redis_url:
        env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_INBOX": str(inbox),
            "PIPELINE_WATCHDOG_INTERVAL_S": "1",
            "PIPELINE_DATA_DIR": str(logs),
        }
        with running_workers(env, logs, count=1):
            argv = [sys.executable, "-m", "pipeline", "beat"]
            beat = Child("beat", argv, env=child_env(env), log_path=logs / "beat.log")
            with beat:
                yield env, inbox, logs / "worker-0.log"


def test_beat_sends_the_watchdog_to_the_workers(scheduled: tuple[dict[str, str], Path, Path]) -> None:
    _, _, worker_log = scheduled
    deadline = time.monotonic() + 60
    while (
        "Task pipeline.watchdog" not in worker_log.read_text() or " succeeded " not in worker_log.read_text()
    ):
        assert time.monotonic() < deadline, "no watchdog task reached the worker"
        time.sleep(0.5)


def test_the_nightly_task_submits_the_inbox_once(
    scheduled: tuple[dict[str, str], Path, Path], pipeline_env: dict[str, str]
) -> None:
    env, inbox, worker_log = scheduled
    write_filings(inbox, 2, seed=73, sizes=[21_000] * 2)
    sender = Celery(broker=env["PIPELINE_REDIS_URL"])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])

    def nightly_runs() -> list[Run]:
        with session_scope(engine) as session:
            return list(session.scalars(select(Run).where(Run.name.like("nightly-%"))))

    sender.send_task("pipeline.nightly", queue=REPORT_QUEUE)
    deadline = time.monotonic() + 120
    while not any(r.status == "completed" for r in nightly_runs()):
        assert time.monotonic() < deadline, "the nightly run did not complete"
        time.sleep(0.5)
    sender.send_task("pipeline.nightly", queue=REPORT_QUEUE)  # nothing new: no second run
    while worker_log.read_text().count("Task pipeline.nightly[") < 2 * 2:  # received, succeeded
        assert time.monotonic() < deadline, "the second nightly task did not run"
        time.sleep(0.5)
    assert len(nightly_runs()) == 1
    sender.close()
