"""The nightly inbox and beat: only new content is submitted; beat sends the watchdog; beat's
inbox goes with the nightly task, workers publish the inbox they read, and beat refuses an inbox
that no live worker reads."""

from __future__ import annotations

import json
import re
import signal
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from celery import Celery
from celery.schedules import crontab
from sqlalchemy import Engine, select

from pipeline.core.constants import REPORT_QUEUE
from pipeline.core.cron import expand, latest_fire
from pipeline.core.settings import Settings
from pipeline.recovery.heartbeat import LiveWorker, live_workers
from pipeline.runs.inbox import check_inbox, inbox_problem
from pipeline.runtime.embedded import Child, child_env
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import claimed_redis_db, eventually, pipeline_child, run_cli, running_workers
from workers.app import beat_schedule


def test_the_beat_schedule_has_the_watchdog_and_the_inbox_only_when_one_is_set() -> None:
    plain = beat_schedule(Settings(_env_file=None))  # type: ignore[call-arg]
    assert set(plain) == {"watchdog"} and plain["watchdog"]["task"] == "pipeline.watchdog"
    nightly = beat_schedule(Settings(_env_file=None, inbox="/data/inbox", inbox_schedule="15 2 * * 1-5"))  # type: ignore[call-arg]
    assert nightly["nightly"]["task"] == "pipeline.nightly"
    assert nightly["nightly"]["args"] == ("/data/inbox",)  # a worker without PIPELINE_INBOX reads beat's
    assert nightly["nightly"]["schedule"] == crontab(minute="15", hour="2", day_of_week="1-5")


def test_a_schedule_that_is_not_a_crontab_expression_is_refused() -> None:
    with pytest.raises(ValueError, match="crontab expression of five fields"):
        Settings(_env_file=None, inbox_schedule="nightly")  # type: ignore[call-arg]


def _celery_takes(expression: str) -> bool:
    minute, hour, day, month, weekday = expression.split()
    try:
        crontab(minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday)
    except ValueError:
        return False
    return True


ACCEPTED = [
    "30 1 * * *",
    "0 */4 * * *",
    "5,35 22-2 * * mon-fri",
    "0 6 1-31/2 jan,jul sun",
    "59 23 31 12 6",
    "0 0 1 * saturday",
    "0-30/10 3 * DEC *",
]
REFUSED = [
    ("30 25 * * *", "hour '25' is not from 0 to 23"),
    ("60 1 * * *", "minute '60' is not from 0 to 59"),
    ("0 1 0 * *", "day of month '0' is not from 1 to 31"),
    ("0 1 * 13 *", "month '13' is not from 1 to 12"),
    ("0 1 * * 7", "weekday '7' is not from 0 to 6 (Sunday is 0)"),
    ("0 1 * * funday", "weekday 'funday' is not a number from 0 to 6"),
    ("5/15 1 * * *", "minute '5/15' has a step without a range: write it as */15"),
    ("*/0 1 * * *", "minute '*/0' has a step of 0"),
    ("-5 1 * * *", "minute '-5' is not *, a number, a range"),
    ("0 1,,2 * * *", "hour '' is not *, a number, a range"),
]


@pytest.mark.parametrize("expression", ACCEPTED)
def test_a_schedule_the_check_accepts_is_one_celery_schedules(expression: str) -> None:
    assert Settings(_env_file=None, inbox_schedule=expression).inbox_schedule == expression  # type: ignore[call-arg]
    assert _celery_takes(expression)


@pytest.mark.parametrize("expression", ACCEPTED)
def test_the_slots_a_schedule_names_are_celerys(expression: str) -> None:
    """The nightly task is sent with the slot it fires for: the latest minute the schedule names,
    read with Celery's own expansion of each field (day of month, month and weekday all match)."""
    minute, hour, day, month, weekday = expression.split()
    celery = crontab(minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday)
    assert expand(expression) == (
        celery.minute,
        celery.hour,
        celery.day_of_month,
        celery.month_of_year,
        celery.day_of_week,
    )


def test_a_late_fire_belongs_to_the_slot_it_missed() -> None:
    now = datetime(2026, 12, 6, 9, 58, 13, tzinfo=UTC)  # a Sunday
    assert latest_fire("30 1 * * *", now) == datetime(2026, 12, 6, 1, 30, tzinfo=UTC)
    assert latest_fire("58 9 * * *", now) == datetime(2026, 12, 6, 9, 58, tzinfo=UTC)
    assert latest_fire("59 9 * * *", now) == datetime(2026, 12, 5, 9, 59, tzinfo=UTC)
    assert latest_fire("5,35 22-2 * * mon-fri", now) == datetime(2026, 12, 4, 23, 35, tzinfo=UTC)
    assert latest_fire("0 0 29 2 *", now) == datetime(2024, 2, 29, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("expression", "reason"), REFUSED)
def test_a_schedule_out_of_range_is_refused_naming_the_field(expression: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"{expression!r}: {reason}")):
        Settings(_env_file=None, inbox_schedule=expression)  # type: ignore[call-arg]


def test_an_hour_25_schedule_is_a_bad_setting_exit_2_for_beat(pipeline_env: dict[str, str]) -> None:
    done = run_cli("beat", env={"PIPELINE_INBOX_SCHEDULE": "30 25 * * *", "PIPELINE_INBOX": "/data/inbox"})
    assert done.returncode == 2, done.stderr
    assert "error: bad setting: PIPELINE_INBOX_SCHEDULE: '30 25 * * *': hour '25' is not from 0 to 23" in (
        done.stderr
    )
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def _worker(host: str, inbox: str | None, state: str = "readable") -> LiveWorker:
    return LiveWorker(f"{host}:1:x", "", 0, 0.0, host=host, inbox=inbox, inbox_state=state)


def test_beat_refuses_an_inbox_that_no_live_worker_reads() -> None:
    refused = check_inbox(
        "/data/inbox", [_worker("a", None, "unset"), _worker("b", "/data/inbox", "missing")]
    )
    assert refused.verdict == "refuse"
    assert refused.message == (
        "PIPELINE_INBOX=/data/inbox is set here but no live worker can read it (workers see: "
        "/data/inbox (missing) on b; no PIPELINE_INBOX on a): mount it on the workers or set "
        "PIPELINE_INBOX there"
    )
    assert check_inbox("/data/inbox", [_worker("a", "/data/inbox/")]).verdict == "ok"
    some = check_inbox("/data/inbox", [_worker("a", "/data/inbox"), _worker("b", "/elsewhere")])
    assert some.verdict == "warn" and "1 of 2 live workers cannot read it" in some.message
    assert check_inbox("/data/inbox", []).verdict == "warn"  # no worker yet: beat starts, warned
    assert check_inbox("/data/inbox", None).verdict == "warn"  # heartbeats unreadable


def test_a_worker_names_the_inbox_it_cannot_read_with_its_host_and_the_fix(tmp_path: Path) -> None:
    assert inbox_problem(str(tmp_path), "h1") is None
    assert inbox_problem(str(tmp_path / "*.txt"), "h1") is None  # a glob: its directory exists
    missing = inbox_problem("/data/typo-inbox", "h1")
    assert missing is not None and "/data/typo-inbox does not exist on worker host h1" in missing
    assert "mount it on the workers" in missing
    unset = inbox_problem(None, "h1")
    assert unset is not None and "PIPELINE_INBOX is not set here" in unset


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
    with pipeline_child("beat", ["beat"], child_env(env), logs / "beat.log"):
        yield [w.log_path for w in workers if w.log_path is not None]


def test_beat_sends_the_watchdog_to_the_workers(beat: list[Path]) -> None:
    def watchdog_ran() -> bool:
        for log in beat:
            lines = [line for line in log.read_text().splitlines() if "pipeline.watchdog[" in line]
            if any(" received" in line for line in lines) and any(" succeeded " in line for line in lines):
                return True
        return False

    eventually("a watchdog task run by the workers", watchdog_ran, 60)


def test_the_nightly_task_submits_the_inbox_once(
    pipeline_env: dict[str, str], workers: list[Child], inbox: Path
) -> None:
    """The session's workers have PIPELINE_INBOX: the task submits what is new there, once."""
    write_filings(inbox, 2, seed=73, sizes=[21_000] * 2)
    url = pipeline_env["PIPELINE_REDIS_URL"]
    sender = Celery(broker=url, backend=url)  # a backend that waits on results
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    before = _nightly_runs(engine)  # other files' nightly runs, in this process's database
    try:
        run_id = sender.send_task("pipeline.nightly", queue=REPORT_QUEUE).get(timeout=60)
        assert isinstance(run_id, str)
        with session_scope(engine) as session:
            run = session.get(Run, run_id)
            assert run is not None and run.name is not None and run.name.startswith("nightly-")
            assert run.estimate and run.estimate["modes"]["sync"]["calls"] > 0, "kept as submit keeps it"
            paths = sorted(
                Path(p).name for p in session.scalars(select(Document.path).where(Document.run_id == run_id))
            )
        assert paths == sorted(p.name for p in inbox.iterdir())
        eventually("the nightly run completed", lambda: _status(engine, run_id) == "completed", 120)
        # Nothing new in the inbox: no second run, and the result says so.
        again = sender.send_task("pipeline.nightly", queue=REPORT_QUEUE).get(timeout=60)
        assert again.startswith(f"nothing new in {inbox}")
        assert _nightly_runs(engine) - before == {run_id}
    finally:
        sender.close()


def test_a_nightly_slot_is_submitted_once(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path: Path
) -> None:
    """Issue 47, item 10: beat sends the nightly submit with the slot it fires for; a second
    task for the same inbox and slot (a second beat's, a standby's catching up on a slot the one
    before it fired) submits nothing, and says which run has it."""
    write_filings(tmp_path, 1, seed=97, sizes=[21_000])
    url = pipeline_env["PIPELINE_REDIS_URL"]
    sender = Celery(broker=url, backend=url)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    slot = "2026-12-06T01:30+00:00"
    try:
        fired = [
            sender.send_task("pipeline.nightly", (str(tmp_path),), {"slot": slot}, queue=REPORT_QUEUE)
            for _ in range(2)
        ]
        first, second = sorted((task.get(timeout=60) for task in fired), key=lambda said: " " in said)
        # Sent together: the second finds the slot taken by the worker submitting it, or its run.
        assert second.startswith(f"already submitted: {tmp_path} for {slot} (")
        eventually("the nightly run completed", lambda: _status(engine, first) == "completed", 120)
        late = sender.send_task("pipeline.nightly", (str(tmp_path),), {"slot": slot}, queue=REPORT_QUEUE)
        assert late.get(timeout=60) == f"already submitted: {tmp_path} for {slot} (run {first})"
        with session_scope(engine) as session:
            runs = set(session.scalars(select(Document.run_id).where(Document.path.like(f"{tmp_path}%"))))
        assert runs == {first}
    finally:
        sender.close()


def _nightly_runs(engine: Engine) -> set[str]:
    with session_scope(engine) as session:
        return set(session.scalars(select(Run.id).where(Run.name.like("nightly-%"))))


def _status(engine: Engine, run_id: str) -> str | None:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        return run.status if run else None


@pytest.fixture(scope="module")
def inboxless(
    pipeline_env: dict[str, str], redis_base: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """A real worker without PIPELINE_INBOX, on the session's database and a broker of its own
    (the session's workers, which have an inbox, never take its messages); its environment."""
    with claimed_redis_db(redis_base) as broker:
        env = {**pipeline_env, "PIPELINE_REDIS_URL": broker}
        with running_workers(env, tmp_path_factory.mktemp("inboxless"), count=1, concurrency=2):
            yield env


def test_a_worker_without_an_inbox_submits_the_one_beat_sends(
    inboxless: dict[str, str], tmp_path: Path
) -> None:
    broker = inboxless["PIPELINE_REDIS_URL"]
    client = redis.Redis.from_url(broker)
    (published,) = live_workers(client)  # what its heartbeat says
    client.close()
    assert (published.inbox, published.inbox_state) == (None, "unset")
    write_filings(tmp_path, 1, seed=79, sizes=[21_000])
    sender = Celery(broker=broker, backend=broker)
    engine = get_engine(inboxless["PIPELINE_DATABASE_URL"])
    try:
        run_id = sender.send_task("pipeline.nightly", (str(tmp_path),), queue=REPORT_QUEUE).get(timeout=60)
        eventually("the nightly run completed", lambda: _status(engine, run_id) == "completed", 120)
        shown = run_cli("status", run_id, "--json", env={**inboxless, "PIPELINE_INBOX": str(tmp_path)})
        assert shown.returncode == 0, shown.stderr
        warning = json.loads(shown.stdout)["inbox_warning"]
        assert warning.startswith(f"PIPELINE_INBOX={tmp_path} is set here but no live worker can read it")
        lost = sender.send_task("pipeline.nightly", ("/data/typo-inbox",), queue=REPORT_QUEUE).get(timeout=60)
        assert lost.startswith("error: ") and "/data/typo-inbox does not exist on worker host" in lost
    finally:
        sender.close()


def test_beat_does_not_start_when_no_live_worker_reads_its_inbox(inboxless: dict[str, str]) -> None:
    started = run_cli("beat", env={**inboxless, "PIPELINE_INBOX": "/data/inbox"}, timeout_s=60)
    assert started.returncode == 2, started.stderr
    assert (
        "PIPELINE_INBOX=/data/inbox is set here but no live worker can read it (workers see: "
        "no PIPELINE_INBOX on "
    ) in started.stderr
    assert "mount it on the workers or set PIPELINE_INBOX there" in started.stderr


def _said(log: Path) -> str:
    return log.read_text() if log.exists() else ""  # a forked child opens its log itself


def _fired(log: Path) -> int:
    """Messages a beat sent, by its log (Celery's line for each)."""
    return _said(log).count("Scheduler: Sending due task watchdog")


def test_two_beats_of_one_schedule_fire_once_and_the_standby_takes_over(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path
) -> None:
    """Issue 47, item 10: two `pipeline beat` of one schedule both fired (two nightly runs of
    the same files, both paid). One fires; the second says it waits as a standby and sends
    nothing; when the first is paused past its lease, the standby takes over, and the first,
    woken, says it lost the schedule and fires no more; when the new holder is killed, the first
    takes the schedule back. The watchdog every second is the schedule; the lease is 3 s."""
    with claimed_redis_db(redis_base) as broker:
        env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": broker,
            "PIPELINE_WATCHDOG_INTERVAL_S": "1",
            "PIPELINE_LEASE_S": "3",
        }
        logs = {name: tmp_path / name for name in ("first", "second")}
        for folder in logs.values():
            folder.mkdir()

        def start(name: str) -> Child:
            folder = logs[name]
            return pipeline_child(
                f"beat-{name}",
                ["beat"],
                child_env({**env, "PIPELINE_DATA_DIR": str(folder)}),
                folder / "beat.log",
            )

        a, b = logs["first"] / "beat.log", logs["second"] / "beat.log"
        beats = [start("first")]
        first = beats[0]
        try:
            eventually("the first beat fires", lambda: _fired(a) >= 1)
            beats.append(second := start("second"))
            eventually("the second says it waits", lambda: "waits as a standby" in _said(b))
            standby = next(line for line in _said(b).splitlines() if "waits as a standby" in line)
            assert (
                f"another beat ({socket.gethostname()}, pid {first.process.pid}) holds the schedule"
                in standby
            )
            assert "takes over within 4 s if that one stops" in standby
            seen = _fired(a)
            eventually("the first fires on", lambda: _fired(a) > seen)
            assert _fired(b) == 0, "a standby sends nothing"

            first.process.send_signal(signal.SIGSTOP)  # paused past its lease
            eventually("the standby takes over", lambda: _fired(b) >= 1, 15)
            assert "takes over the schedule" in _said(b)
            before = _fired(a)
            first.process.send_signal(signal.SIGCONT)
            eventually("the first says it lost the schedule", lambda: "lost the schedule" in _said(a))
            assert "it stops firing and waits as a standby" in _said(a)
            seen = _fired(b)
            eventually("the new holder fires on", lambda: _fired(b) > seen)
            assert _fired(a) == before, "a beat that lost its lease sends nothing"

            second.process.kill()
            eventually("the first takes the schedule back", lambda: _fired(a) > before, 15)
        finally:
            first.process.send_signal(signal.SIGCONT)
            for beat in beats:
                beat.stop()


def test_a_nightly_submit_with_a_deadline_already_past_stores_nothing_and_says_why(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 47: a deadline already past was accepted without a word and the run planned at the
    standard tier. The nightly submit fixes the deadline before it reads the inbox, as submit
    does: a past one is refused at ERROR, naming the setting, and nothing is stored."""
    past = "2026-01-02T06:00:00+00:00"
    inbox = tmp_path / "inbox"
    write_filings(inbox, 1, seed=147, sizes=[6_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    before = _nightly_runs(engine)
    with claimed_redis_db(redis_base) as broker:
        env = {**pipeline_env, "PIPELINE_REDIS_URL": broker, "PIPELINE_RUN_DEADLINE": past}
        with running_workers(env, tmp_path_factory.mktemp("past-deadline"), count=1, concurrency=1):
            sender = Celery(broker=broker, backend=broker)
            try:
                said = sender.send_task("pipeline.nightly", (str(inbox),), queue=REPORT_QUEUE).get(timeout=60)
            finally:
                sender.close()
    assert said.startswith("error: nightly run not started on worker host "), said
    assert f"PIPELINE_RUN_DEADLINE {past} is already past" in said
    assert _nightly_runs(engine) == before, "a run was stored"
