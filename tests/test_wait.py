"""`--wait` tells the truth: it names a run that does not move and gives up on it (exit 4), counts
only answered calls as progress, and prints a plain line where no terminal shows a bar."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.core import exits
from pipeline.runs.progress import (
    CALLS_FAILING,
    NO_WORKER,
    PAUSED,
    Figures,
    Snapshot,
    Stuck,
    span,
    stuck_state,
)
from pipeline.runs.status import CallOutcomes, RunStatusView
from pipeline.runtime.embedded import child_env
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.intake import delete_run
from pipeline_dev.synth_filings import generate_filing
from tests.conftest import claimed_redis_db, run_cli

BOUND_S = 180.0
LINE = re.compile(
    r"^run (?P<run>\S+): (extracting|reporting|completed|failed|stalled) "
    r"(?P<done>\d+)/(?P<total>\d+) documents( \(\d+ failed\))?, "
    r"(?P<chunks_done>\d+)/(?P<chunks>\d+) chunks, \d+ calls answered(, \d+ failed)?, [\d,]+ tokens, "
    r"(\d+s|\d+m\d\ds|\d+h\d\dm)(; .+)?$"
)


def _every(step_s: float, until_s: float, **fields: object) -> list[Snapshot]:
    """Snapshots every `step_s` seconds from 0 to `until_s`, all alike."""
    count = int(until_s / step_s) + 1
    return [Snapshot(at=i * step_s, **fields) for i in range(count)]  # type: ignore[arg-type]


def _judged(snapshots: list[Snapshot], now: float) -> Stuck | None:
    return stuck_state(snapshots, now, BOUND_S)


# -- no live worker ------------------------------------------------------------------------


def test_a_run_with_workers_that_moves_is_not_stuck() -> None:
    moving = [Snapshot(at=t, chunks_done=t, calls_ok=t, live_workers=2, paused_for_s=0) for t in range(300)]
    assert _judged(moving, 300) is None


def test_no_live_worker_is_named_at_once_and_gives_up_after_the_bound() -> None:
    idle = _every(2, 200, live_workers=0, paused_for_s=0)
    assert _judged(idle[:3], 4) is None, "a worker starting up is not worth a line"
    named = _judged(idle[:30], 60)
    assert named is not None and named.name == NO_WORKER and not named.gives_up
    assert "pipeline worker" in named.message and "1m00s" in named.message
    stuck = _judged(idle, 200)
    assert stuck is not None and stuck.name == NO_WORKER and stuck.gives_up and stuck.held_s == 200


def test_a_worker_that_comes_back_ends_the_no_worker_state() -> None:
    snapshots = [*_every(2, 100, live_workers=0), Snapshot(at=102, live_workers=1)]
    assert _judged(snapshots, 250) is None


def test_a_broker_that_does_not_answer_neither_starts_nor_ends_the_no_worker_state() -> None:
    assert _judged(_every(2, 200, live_workers=None), 200) is None
    gap = [*_every(2, 100, live_workers=0), *[Snapshot(at=t, live_workers=None) for t in range(102, 200, 2)]]
    stuck = _judged(gap, 200)
    assert stuck is not None and stuck.name == NO_WORKER and stuck.gives_up


def test_documents_moving_without_a_seen_heartbeat_are_not_stuck() -> None:
    moving = [Snapshot(at=t, documents_done=t // 10, live_workers=0) for t in range(0, 300, 2)]
    stuck = _judged(moving, 300)
    assert stuck is None or not stuck.gives_up


# -- every call failing --------------------------------------------------------------------


def test_calls_that_all_fail_are_stuck_after_the_bound_and_name_the_last_error() -> None:
    failing = [
        Snapshot(
            at=t, calls_failed=t // 2, live_workers=2, last_error="UpstreamUnavailable: connection refused"
        )
        for t in range(0, 200, 2)
    ]
    named = _judged(failing[:40], 80)
    assert named is not None and named.name == CALLS_FAILING and not named.gives_up
    stuck = _judged(failing, 200)
    assert stuck is not None and stuck.name == CALLS_FAILING and stuck.gives_up
    assert "connection refused" in stuck.message and "pipeline doctor" in stuck.message
    assert "none answered" in stuck.message


def test_failed_calls_and_failed_documents_are_not_progress() -> None:
    # The endpoint is down: calls fail, and so, one by one, do the documents.
    failing = [
        Snapshot(
            at=t,
            calls_failed=t,
            documents_done=t // 20,
            documents_failed=t // 20,
            live_workers=2,
            paused_for_s=0,
        )
        for t in range(0, 200, 2)
    ]
    stuck = _judged(failing, 200)
    assert stuck is not None and stuck.name == CALLS_FAILING and stuck.gives_up


def test_an_answered_call_between_failures_restarts_the_count() -> None:
    snapshots = [Snapshot(at=t, calls_failed=t, live_workers=2) for t in range(0, 150, 2)]
    snapshots += [Snapshot(at=t, calls_failed=t, calls_ok=1, live_workers=2) for t in range(150, 300, 2)]
    stuck = _judged(snapshots, 300)
    assert stuck is not None and stuck.name == CALLS_FAILING and not stuck.gives_up
    assert 148 <= stuck.held_s <= 152


def test_one_failed_call_retried_with_success_is_not_named() -> None:
    snapshots = [Snapshot(at=0, live_workers=2), Snapshot(at=2, calls_failed=1, live_workers=2)]
    snapshots += [Snapshot(at=t, calls_failed=1, calls_ok=t, live_workers=2) for t in range(4, 300, 2)]
    assert _judged(snapshots, 300) is None


def test_failures_from_before_the_wait_began_do_not_count() -> None:
    old = _every(2, 250, calls_failed=84, live_workers=2)
    assert _judged(old, 250) is None


def test_a_long_batch_wait_with_nothing_failing_is_not_stuck() -> None:
    assert _judged(_every(30, 7200, live_workers=2, paused_for_s=0), 7200) is None


# -- the limiter's pause -------------------------------------------------------------------


def test_a_pause_shorter_than_the_bound_is_named_but_never_gives_up() -> None:
    pause = [Snapshot(at=t, live_workers=2, paused_for_s=120 - t) for t in range(0, 120, 2)]
    named = _judged(pause, 118)
    assert named is not None and named.name == PAUSED and not named.gives_up
    assert "PIPELINE_RATE_LIMIT_RPM" in named.message
    after = [*pause, *[Snapshot(at=t, live_workers=2, paused_for_s=0) for t in range(120, 400, 2)]]
    assert _judged(after, 400) is None


def test_a_pause_longer_than_the_bound_gives_up_after_the_bound() -> None:
    pause = [Snapshot(at=t, live_workers=2, paused_for_s=600 - t) for t in range(0, 200, 2)]
    stuck = _judged(pause, 200)
    assert stuck is not None and stuck.name == PAUSED and stuck.gives_up
    assert "calls wait 6m42s more (3m20s without progress)" in stuck.message


def test_a_pause_of_one_scope_while_another_answers_never_gives_up() -> None:
    pause = [Snapshot(at=t, calls_ok=t, live_workers=2, paused_for_s=600 - t) for t in range(0, 300, 2)]
    stuck = _judged(pause, 300)
    assert stuck is None or not stuck.gives_up


def test_no_worker_is_named_before_a_pause_or_failures() -> None:
    snapshots = _every(2, 200, live_workers=0, paused_for_s=500.0, calls_failed=0)
    snapshots += [Snapshot(at=202, live_workers=0, paused_for_s=300.0, calls_failed=3)]
    stuck = _judged(snapshots, 202)
    assert stuck is not None and stuck.name == NO_WORKER


# -- what the displays say -----------------------------------------------------------------


def _view(**fields: object) -> RunStatusView:
    base: dict[str, object] = {
        "run_id": "r-1",
        "name": None,
        "status": "running",
        "query": "q",
        "model": "m",
        "simulated": True,
        "created_at": "",
        "finished_at": None,
        "elapsed_s": 80.0,
    }
    return RunStatusView(**{**base, **fields})  # type: ignore[arg-type]


def test_the_plain_line_shows_documents_chunks_answered_and_failed_calls_and_tokens() -> None:
    view = _view(
        documents={"extracted": 2, "failed": 1, "running": 5},
        documents_total=8,
        documents_done=3,
        chunks_total=120,
        chunks_done=41,
        llm_calls=52,
        prompt_tokens=100_000,
        completion_tokens=1_234,
    )
    line = Figures(view, CallOutcomes(answered=50, failed=2, last_error="x"), None).line()
    assert line == (
        "run r-1: extracting 3/8 documents (1 failed), 41/120 chunks, 50 calls answered, 2 failed, "
        "101,234 tokens, 1m20s"
    )
    assert LINE.match(line)


def test_failed_calls_are_never_shown_as_calls_made() -> None:
    view = _view(documents={"pending": 8}, documents_total=8, chunks_total=8, llm_calls=84)
    stuck = Stuck(CALLS_FAILING, "…", 95.0, False)
    line = Figures(view, CallOutcomes(answered=0, failed=84, last_error="refused"), stuck).line()
    assert "0 calls answered, 84 failed" in line and line.endswith("; every call failing for 1m35s")
    assert LINE.match(line)


def test_durations_read_as_people_read_them() -> None:
    assert [span(s) for s in (0, 42.9, 60, 80, 3599, 7380)] == [
        "0s",
        "42s",
        "1m00s",
        "1m20s",
        "59m59s",
        "2h03m",
    ]


# -- end to end ----------------------------------------------------------------------------


@pytest.fixture
def one_filing(tmp_path: Path) -> Path:
    text, truth = generate_filing(1, seed=7, target_bytes=4_000)
    path = tmp_path / truth.filename
    path.write_text(text, encoding="utf-8")
    return path


def _forget(database_url: str, run_id: str) -> None:
    """Delete the test's run: a run left `running` would be the shared database's newest."""
    with session_scope(get_engine(database_url)) as session:
        delete_run(session, run_id)


@pytest.fixture
def own_broker(redis_base: str) -> Iterator[str]:
    with claimed_redis_db(redis_base) as url:
        yield url


def test_submit_wait_with_no_live_worker_exits_4_naming_it(
    pipeline_env: dict[str, str], own_broker: str, one_filing: Path
) -> None:
    env = {**pipeline_env, "PIPELINE_REDIS_URL": own_broker, "PIPELINE_WAIT_STUCK_S": "1"}
    result = run_cli("submit", str(one_filing), "--wait", env=env, timeout_s=60)
    run_id = result.stdout.strip().splitlines()[-1]
    try:
        assert result.returncode == exits.STUCK, result.stderr
        assert f"run {run_id} is stuck: no live worker" in result.stderr
        assert f"the run goes on: follow it with `pipeline status {run_id}`" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        _forget(pipeline_env["PIPELINE_DATABASE_URL"], run_id)


def test_submit_without_wait_to_a_broker_no_worker_listens_on_warns(
    pipeline_env: dict[str, str], own_broker: str, one_filing: Path
) -> None:
    result = run_cli("submit", str(one_filing), env={**pipeline_env, "PIPELINE_REDIS_URL": own_broker})
    run_id = result.stdout.strip()
    try:
        assert result.returncode == 0, result.stderr
        host = own_broker.removeprefix("redis://")
        assert f"warning: no live worker was seen on the broker {host}: the run waits" in " ".join(
            result.stderr.split()
        ), result.stderr
        assert re.fullmatch(r"[0-9a-f]{32}", run_id), "stdout is still the run id alone"
        shown = run_cli("status", run_id, env={**pipeline_env, "PIPELINE_REDIS_URL": own_broker})
        assert shown.returncode == 0, shown.stderr
        assert "workers none live (no heartbeat in this broker): nothing takes this run's documents" in (
            " ".join(shown.stdout.split())
        ), shown.stdout
    finally:
        _forget(pipeline_env["PIPELINE_DATABASE_URL"], run_id)


def test_with_wait_the_run_id_is_the_last_line_printed_as_without(
    pipeline_env: dict[str, str], own_broker: str, one_filing: Path
) -> None:
    # The README: "the run id is the last line"; a terminal shows stdout and stderr as one.
    env = child_env({**pipeline_env, "PIPELINE_REDIS_URL": own_broker, "PIPELINE_WAIT_STUCK_S": "1"})
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "submit", str(one_filing), "--wait"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )
    lines = done.stdout.strip().splitlines()
    run_id = lines[-1]
    try:
        assert done.returncode == exits.STUCK, done.stdout
        assert re.fullmatch(r"[0-9a-f]{32}", run_id), done.stdout
        named = lines.index(f"submitted 1 documents: run {run_id}")  # at once, to follow it elsewhere
        assert named < len(lines) - 2 and "is stuck" in " ".join(lines[named:-1]), done.stdout
        assert lines.count(run_id) == 1, done.stdout
    finally:
        _forget(pipeline_env["PIPELINE_DATABASE_URL"], run_id)


@pytest.mark.usefixtures("workers")
def test_off_a_terminal_wait_prints_plain_progress_lines(
    pipeline_env: dict[str, str], one_filing: Path
) -> None:
    env = {**pipeline_env, "PIPELINE_PROGRESS_INTERVAL_S": "0.2"}
    result = run_cli("submit", str(one_filing), "--wait", env=env)
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.strip().splitlines()[-1]
    lines = [m for line in result.stderr.splitlines() if (m := LINE.match(line))]
    assert lines, result.stderr
    assert all(m["run"] == run_id for m in lines)
    last = lines[-1]
    assert (last["done"], last["total"]) == ("1", "1")
    assert last["chunks_done"] == last["chunks"] != "0"
