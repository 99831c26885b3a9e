"""The nightly inbox and beat: only new content is submitted; beat sends the watchdog."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery
from celery.schedules import crontab
from sqlalchemy import Engine, select

from pipeline.core.constants import REPORT_QUEUE
from pipeline.core.settings import Settings
from pipeline.runtime.embedded import Child, child_env
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import run_cli
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
def beat(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Path]]:
    """`pipeline beat` sending the watchdog every second to the session's workers; their logs."""
    logs = tmp_path_factory.mktemp("beat")
    env = {**pipeline_env, "PIPELINE_WATCHDOG_INTERVAL_S": "1", "PIPELINE_DATA_DIR": str(logs)}
    argv = [sys.executable, "-m", "pipeline", "beat"]
    with Child("beat", argv, env=child_env(env), log_path=logs / "beat.log"):
        yield [w.log_path for w in workers if w.log_path is not None]


def test_beat_sends_the_watchdog_to_the_workers(beat: list[Path]) -> None:
    def watchdog_ran() -> bool:
        for log in beat:
            lines = [line for line in log.read_text().splitlines() if "pipeline.watchdog[" in line]
            if any(" received" in line for line in lines) and any(" succeeded " in line for line in lines):
                return True
        return False

    deadline = time.monotonic() + 60
    while not watchdog_ran():
        assert time.monotonic() < deadline, "no watchdog task reached the workers"
        time.sleep(0.5)


def test_the_nightly_task_submits_the_inbox_once(
    pipeline_env: dict[str, str], workers: list[Child], inbox: Path
) -> None:
    """The session's workers have PIPELINE_INBOX: the task submits what is new there, once."""
    write_filings(inbox, 2, seed=73, sizes=[21_000] * 2)
    url = pipeline_env["PIPELINE_REDIS_URL"]
    sender = Celery(broker=url, backend=url)  # a backend that waits on results
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    try:
        run_id = sender.send_task("pipeline.nightly", queue=REPORT_QUEUE).get(timeout=60)
        assert isinstance(run_id, str)
        with session_scope(engine) as session:
            run = session.get(Run, run_id)
            assert run is not None and run.name is not None and run.name.startswith("nightly-")
            paths = sorted(
                Path(p).name for p in session.scalars(select(Document.path).where(Document.run_id == run_id))
            )
        assert paths == sorted(p.name for p in inbox.iterdir())
        deadline = time.monotonic() + 120
        while _status(engine, run_id) != "completed":
            assert time.monotonic() < deadline, "the nightly run did not complete"
            time.sleep(0.5)
        # Nothing new in the inbox: no second run.
        assert sender.send_task("pipeline.nightly", queue=REPORT_QUEUE).get(timeout=60) is None
        with session_scope(engine) as session:
            nightly = list(session.scalars(select(Run.id).where(Run.name.like("nightly-%"))))
        assert nightly == [run_id]
    finally:
        sender.close()


def _status(engine: Engine, run_id: str) -> str | None:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        return run.status if run else None
