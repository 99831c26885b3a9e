"""Issue 28: two real workers whose wall clocks are 60 s apart, through a duplicate delivery, a
resume and a kill. Every lease decision is taken on the database's clock, so the worker ahead
never takes the other's live lease, no live owner's document is reclaimed, each chunk is paid
for once, and the survivor finishes the run after the kill.

One worker's wall clock is moved by `tests/clockshift.c`, an LD_PRELOAD shim that shifts
`clock_gettime(CLOCK_REALTIME)`, `gettimeofday` and `time` only (libfaketime, which moves the
monotonic clock too, hangs Python's timed waits on this machine). Against Postgres: SQLite is
one host's file, whose host's clock is the only clock.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest
from celery import Celery
from sqlalchemy import Engine, func, select

from pipeline.llm.prompts import delimited
from pipeline.runtime import embedded
from pipeline.storage import clock
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Chunk, Content, Document, Extraction, LLMCall, Report, Run
from pipeline_dev.bench.procs import sim_configure
from pipeline_dev.synth_filings import write_filings
from tests.conftest import WORKER_READY_TIMEOUT_S, claimed_redis_db, eventually, run_cli, running_simulator

SHIM_SOURCE = Path(__file__).with_name("clockshift.c")
SHIFT_S = 60.0
"""How far ahead the skewed worker's wall clock runs: twenty of its leases."""
LEASE_S = 3.0
THREADS = 4
"""Each worker's task threads (and chunk threads): one more than the three documents each takes
at the start, so a duplicate sent to a worker runs at once, while the document is still held."""
DOCS = 6
DOC_CHARS = 150_000
"""About 12 chunks each, at about 1 s a call: a worker's documents take about 9 s of its chunk
threads, so documents are held while the duplicates, the resume and the kill come."""
RECOVERY_S = 180.0
"""Issue 28: the run completes within this long of the kill."""
WAIT_S = 60.0
T = TypeVar("T")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def clockshift(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shim, built with gcc (the test is skipped without it, and fails under CI=true)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        reason = "gcc is not installed: it builds tests/clockshift.c, the shim that moves a worker's clock"
        if _in_ci():
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    built = tmp_path_factory.mktemp("clockshift") / "clockshift.so"
    made = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O2", "-o", str(built), str(SHIM_SOURCE), "-ldl"],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    return built


def shifted(env: dict[str, str], shim: Path, seconds: float) -> dict[str, str]:
    """`env` for a process whose wall clock runs `seconds` ahead (behind, when negative)."""
    return {**env, "LD_PRELOAD": str(shim), "CLOCKSHIFT_S": str(seconds)}


PROBE = (
    "import datetime, json, threading, time\n"
    "began = time.monotonic()\n"
    "threading.Event().wait(0.1)\n"
    "waited = time.monotonic() - began\n"
    "print(json.dumps([time.time(), datetime.datetime.now(datetime.UTC).timestamp(), waited]))\n"
)


@pytest.mark.parametrize("seconds", [SHIFT_S, -SHIFT_S])
def test_the_shim_moves_the_wall_clock_and_leaves_timed_waits_alone(clockshift: Path, seconds: float) -> None:
    """A Python under the shim reads a wall clock `seconds` off (time.time and datetime.now), and
    its timed waits (on the monotonic clock) last what they say: libfaketime hung them."""
    before = time.time()
    probe = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=embedded.child_env(shifted({}, clockshift, seconds)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    after = time.time()
    assert probe.returncode == 0, probe.stderr
    wall, now, waited = json.loads(probe.stdout)
    for read in (wall, now):
        assert before + seconds - 0.01 <= read <= after + seconds + 0.01, (before, read, after)
    assert 0.09 <= waited < 5, f"Event().wait(0.1) took {waited:.2f} s under the shim"


@dataclass
class Worker:
    """A real `pipeline worker` process, with a queue of its own: a delivery sent there lands
    on it, not on the other."""

    child: embedded.Child
    queue: str
    shift_s: float

    @property
    def pid(self) -> int:
        return self.child.process.pid

    def owns(self, owner: str | None) -> bool:
        """Whether a lease owner (`host:pid:tag`) is this process."""
        parts = (owner or "").split(":")
        return len(parts) == 3 and parts[1] == str(self.pid)

    def log(self) -> str:
        assert self.child.log_path is not None
        return self.child.log_path.read_text(errors="replace")


def _start(env: dict[str, str], logs: Path, name: str, shift_s: float, shim: Path) -> Worker:
    queue = f"{name}-{uuid.uuid4().hex[:6]}"
    argv = [sys.executable, "-m", "pipeline", "worker", "--concurrency", str(THREADS)]
    argv += ["--name", f"{queue}@%h", "--queues", f"extract,report,{queue}"]
    child_env = embedded.child_env(shifted(env, shim, shift_s) if shift_s else env)
    return Worker(embedded.Child(name, argv, env=child_env, log_path=logs / f"{name}.log"), queue, shift_s)


@contextmanager
def workers_apart(env: dict[str, str], logs: Path, shim: Path) -> Iterator[tuple[Worker, Worker]]:
    """Two ready workers: (one whose wall clock runs SHIFT_S ahead, one on the host's clock)."""
    ahead = _start(env, logs, "ahead", SHIFT_S, shim)
    plain = _start(env, logs, "plain", 0.0, shim)
    children = [ahead.child, plain.child]
    try:
        try:
            embedded.wait_until_ready(children, WORKER_READY_TIMEOUT_S)
        except RuntimeError as exc:
            pytest.fail(str(exc))
        maps = {w.queue: Path(f"/proc/{w.pid}/maps").read_text() for w in (ahead, plain)}
        assert str(shim) in maps[ahead.queue] and str(shim) not in maps[plain.queue], "the shim is loaded"
        yield ahead, plain
    finally:
        embedded.stop_all(children)


def held(engine: Engine, run_id: str, worker: Worker) -> dict[int, int]:
    """The run's documents leased to `worker` now: {id: fence}."""
    with session_scope(engine) as session:
        rows = session.execute(
            select(Document.id, Document.lease_owner, Document.fence).where(
                Document.run_id == run_id, Document.status == "running"
            )
        ).tuples()
        return {int(i): int(fence) for i, owner, fence in rows if worker.owns(owner)}


def leases(engine: Engine, ids: list[int]) -> dict[int, tuple[str, str | None, int]]:
    with session_scope(engine) as session:
        rows = session.execute(
            select(Document.id, Document.status, Document.lease_owner, Document.fence).where(
                Document.id.in_(ids)
            )
        ).tuples()
        return {int(i): (str(status), owner, int(fence)) for i, status, owner, fence in rows}


def outcome(worker: Worker, task_id: str) -> str | None:
    """What the worker's extract task `task_id` returned (None until it ended)."""
    found = re.search(
        rf"Task pipeline\.extract\[{task_id}\] (succeeded in [0-9.]+s: (.*)|retry|failed)", worker.log()
    )
    if found is None:
        return None
    return found.group(2) or found.group(1)


@dataclass(frozen=True)
class Duplicate:
    task_id: str
    document_id: int
    fence: int
    """The holder's fence when the duplicate was sent: a receiver that took the lease raised it."""
    holder: Worker
    receiver: Worker


def send_duplicates(
    sender: Celery, engine: Engine, run_id: str, workers: tuple[Worker, Worker]
) -> list[Duplicate]:
    """Each document either worker holds is delivered again, to the other one's queue."""
    sent = []
    for holder, receiver in (workers, workers[::-1]):
        for document_id, fence in held(engine, run_id, holder).items():
            task = sender.send_task("pipeline.extract", args=[document_id], queue=receiver.queue)
            sent.append(Duplicate(task.id, document_id, fence, holder, receiver))
    return sent


def reclaims_logged(workers: tuple[Worker, Worker], run_id: str) -> list[str]:
    """The owners the workers' heartbeats reclaimed documents of the run from."""
    pattern = rf"reclaimed document \d+ of run {run_id} from (a reclaim|\S+)"
    return [owner for w in workers for owner in re.findall(pattern, w.log())]


def reclaimed(engine: Engine, run_id: str) -> dict[int, str | None]:
    """The run's documents a heartbeat reclaimed: {id: the owner it last reclaimed it from}."""
    with session_scope(engine) as session:
        rows = session.execute(
            select(Document.id, Document.reclaimed_from).where(
                Document.run_id == run_id, Document.reclaims > 0
            )
        ).tuples()
        return {int(i): owner for i, owner in rows}


def run_status(engine: Engine, run_id: str) -> str | None:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.status if run.status in ("completed", "failed") else None


def unfinished(engine: Engine, run_id: str) -> int:
    with session_scope(engine) as session:
        return int(
            session.scalar(
                select(func.count()).where(Document.run_id == run_id, Document.status != "extracted")
            )
            or 0
        )


def calls_per_chunk(engine: Engine, run_id: str) -> tuple[set[tuple[int, int]], Counter[tuple[int, int]]]:
    """(the run's chunks, the successful extract calls recorded for each) as (document, idx)."""
    with session_scope(engine) as session:
        chunks = session.execute(
            select(Chunk.document_id, Chunk.idx).join(Document).where(Document.run_id == run_id)
        ).tuples()
        calls = session.execute(
            select(LLMCall.document_id, LLMCall.chunk_idx).where(
                LLMCall.run_id == run_id, LLMCall.stage == "extract", LLMCall.status == "ok"
            )
        ).tuples()
        return {(int(d), int(i)) for d, i in chunks}, Counter((int(d or 0), int(i or 0)) for d, i in calls)


def paid_per_chunk(engine: Engine, run_id: str, record: Path) -> Counter[tuple[int, int]]:
    """The requests the simulator answered (200) for each chunk of the run, from its record: a
    request is a chunk's when it holds the chunk's text as its document part."""
    with session_scope(engine) as session:
        rows = session.execute(
            select(Chunk.document_id, Chunk.idx, Chunk.char_start, Chunk.char_end, Content.text)
            .join(Document, Document.id == Chunk.document_id)
            .join(Content, Content.sha256 == Document.sha256)
            .where(Document.run_id == run_id)
        ).tuples()
        parts = {delimited(text[start:end]): (int(d), int(i)) for d, i, start, end, text in rows}
    paid: Counter[tuple[int, int]] = Counter()
    for line in record.read_text().splitlines():
        entry = json.loads(line)
        if entry["status"] != 200:
            continue
        asked = "\n".join(str(m.get("content")) for m in entry["messages"] or [])
        paid.update(chunk for part, chunk in parts.items() if part in asked)
    return paid


def check_duplicates(sender: Celery, engine: Engine, run_id: str, pair: tuple[Worker, Worker]) -> int:
    """A duplicate delivery of each document either worker holds, to the other: none takes the
    live lease (its fence stays). Returns how many reached the worker ahead under a live lease."""
    ahead, _ = pair
    eventually("both workers hold documents", lambda: all(held(engine, run_id, w) for w in pair))
    duplicates = send_duplicates(sender, engine, run_id, pair)
    returned = {
        d.task_id: eventually("the duplicate ran", partial(outcome, d.receiver, d.task_id))
        for d in duplicates
    }
    after = leases(engine, [d.document_id for d in duplicates])
    for d in duplicates:
        status, owner, fence = after[d.document_id]
        assert fence == d.fence and (status != "running" or d.holder.owns(owner)), (
            f"the worker {d.receiver.shift_s:+.0f} s took document {d.document_id}'s live lease from the "
            f"one {d.holder.shift_s:+.0f} s: fence {d.fence} -> {fence}, now {status} (owner {owner}); "
            f"its task returned {returned[d.task_id]}"
        )
    live = sum(1 for d in duplicates if d.receiver is ahead and returned[d.task_id] == "'running'")
    assert live, f"no duplicate reached the worker ahead while the other's lease was live: {returned}"
    return live


def check_resume(engine: Engine, run_id: str, env: dict[str, str]) -> int:
    """`pipeline resume --stale-after-s 0` while documents are in flight: every running one is
    sent again, to whichever worker takes it. Returns how many it sent."""
    assert unfinished(engine, run_id), "the run ended before the resume"
    resumed = run_cli("resume", run_id, "--stale-after-s", "0", env=env)
    assert resumed.returncode == 0, resumed.stderr
    again = re.search(r"(\d+) documents enqueued again", resumed.stderr)
    assert again and int(again.group(1)) > 0, resumed.stderr
    return int(again.group(1))


def kill_a_holder(engine: Engine, run_id: str, pair: tuple[Worker, Worker]) -> tuple[Worker, dict[int, int]]:
    """SIGKILL the worker ahead if it holds documents of the run, else the other: (it, the
    documents it held when it died, with their fences). No reclaim came before."""
    victim = next((w for w in pair if held(engine, run_id, w)), None)
    assert victim is not None, "no worker held a document of the run at the kill: nothing to reclaim"
    early = (reclaims_logged(pair, run_id), reclaimed(engine, run_id))
    assert early == ([], {}), f"documents were reclaimed while both workers were alive: {early}"
    victim.child.process.send_signal(signal.SIGKILL)
    victim.child.process.wait(10)
    # Its leases stand for at least two more beats: what names it now is what it held.
    held_at_kill = held(engine, run_id, victim)
    assert held_at_kill, "the killed worker held no document of the run"
    return victim, held_at_kill


def assert_paid_once(engine: Engine, run_id: str, record: Path, in_flight: set[int]) -> tuple[int, int]:
    """Each chunk's answer recorded once, and asked of the provider once but for the calls the
    killed worker had in flight (of documents it held, never recorded, asked again by the
    survivor): one on each of its chunk threads, or on a task thread (a document's last chunk
    goes without the pool). Returns (chunks, chunks asked twice)."""
    chunks, recorded = calls_per_chunk(engine, run_id)
    assert set(recorded) == chunks and set(recorded.values()) == {1}, {
        c: n for c, n in recorded.items() if n != 1
    }
    paid = paid_per_chunk(engine, run_id, record)
    assert set(paid) == chunks, f"chunks never asked: {chunks - set(paid)}"
    twice = {c: n for c, n in paid.items() if n > 1}
    assert all(doc in in_flight for doc, _ in twice), f"asked again, not in flight at the kill: {twice}"
    assert sum(n - 1 for n in twice.values()) <= 2 * THREADS, f"more asked again than in flight: {twice}"
    return len(chunks), len(twice)


def test_workers_a_minute_apart_pay_each_chunk_once_and_reclaim_only_from_the_dead(
    clockshift: Path,
    pipeline_env: dict[str, str],
    redis_base: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Defect 1 of issue 28: a worker whose clock ran 45 s ahead took another's live 30 s lease
    on a duplicate delivery, and the first worker's calls were paid twice. Here the worker 60 s
    ahead gets a duplicate of each document the other holds (and the other one of each it
    holds), then a resume sends every running document again to whichever worker takes it,
    then the worker holding documents (the one ahead, when it holds any) is killed: the other
    takes its documents back on the database's clock and finishes the run."""
    if not pipeline_env["PIPELINE_DATABASE_URL"].startswith("postgresql"):
        pytest.skip("SQLite is one host's file: its host's clock is the only clock (Postgres under CI)")
    write_filings(tmp_path, DOCS, seed=128, sizes=[DOC_CHARS] * DOCS)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    logs = tmp_path_factory.mktemp("clock-skew")
    record = logs / "requests.jsonl"
    # Answers slow enough that the run outlasts the duplicates and the resume on a loaded machine.
    sim_args = ("--p50", "1.5", "--p95", "2.0", "--seed", "28", "--record", str(record))
    with claimed_redis_db(redis_base) as redis_url, running_simulator(logs, *sim_args) as sim:
        env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_BASE_URL": sim,
            "PIPELINE_LEASE_S": str(LEASE_S),
        }
        with Celery(broker=redis_url) as sender, workers_apart(env, logs, clockshift) as pair:
            submitted = run_cli("submit", str(tmp_path), "--fresh", env=env)
            assert submitted.returncode == 0, submitted.stderr
            run_id = submitted.stdout.strip().splitlines()[-1]
            live = check_duplicates(sender, engine, run_id, pair)
            resent = check_resume(engine, run_id, env)
            victim, held_at_kill = kill_a_holder(engine, run_id, pair)
            killed = time.monotonic()
            sim_configure(sim, p50_s=0.3, p95_s=0.5)  # the slow answers were for what came before
            status = eventually("the run ended", lambda: run_status(engine, run_id), RECOVERY_S)
            ended_s = time.monotonic() - killed
            assert status == "completed", status
            assert all(w.child.problem() is None for w in pair if w is not victim), "the survivor died"
            owners = reclaims_logged(pair, run_id)
    with session_scope(engine) as session:
        docs = list(session.scalars(select(Document).where(Document.run_id == run_id)))
        extractions = session.scalar(
            select(func.count()).where(Extraction.document_id.in_([d.id for d in docs]))
        )
        reports = session.scalar(select(func.count()).where(Report.run_id == run_id))
    assert [d.status for d in docs] == ["extracted"] * DOCS and extractions == DOCS and reports == 1
    # The survivor took back what the dead one held (a reclaim, or a resent delivery once its
    # lease ran out) and reclaimed nothing from a live owner.
    fences = {d.id: d.fence for d in docs}
    assert all(fences[i] > fence for i, fence in held_at_kill.items()), (held_at_kill, fences)
    # ("a reclaim": a reclaimed document's new delivery waited past its grace, and was sent again.)
    assert all(o == "a reclaim" or victim.owns(o) for o in owners), (victim.pid, owners)
    taken = reclaimed(engine, run_id)
    assert all(victim.owns(owner) for owner in taken.values()), (victim.pid, taken)
    chunks, twice = assert_paid_once(engine, run_id, record, set(held_at_kill))
    print(
        f"clocks {SHIFT_S:.0f} s apart: {live} duplicates to the worker ahead under a live lease refused; "
        f"resume sent {resent} again; killed the worker {victim.shift_s:+.0f} s holding {len(held_at_kill)}, "
        f"{len(taken)} reclaimed, run completed {ended_s:.1f} s after the kill; "
        f"{chunks} chunks, each recorded once, {twice} asked twice (in flight at the kill)"
    )


FLEX_SHIFT_S = 25 * 60.0
"""How far ahead the clocks of the submitter and the worker run: past the run's deadline."""


def test_a_flex_run_planned_and_worked_by_hosts_25_minutes_ahead_stays_at_flex_until_standard_from(
    clockshift: Path,
    pipeline_env: dict[str, str],
    redis_base: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Issue 47: the auto plan at submit read the submitting host's clock, and the switch from
    flex to the standard tier compared `standard_from` with the worker's own. A deadline 20
    minutes away on the database's clock leaves flex time (about a minute's work); a submitter
    whose clock runs 25 minutes ahead planned it at the standard tier (the deadline looked
    past), and a worker that far ahead sent every flex call at the standard tier at once. On
    the one clock (the database's at submit, Redis TIME in the worker), the run is planned at
    flex and every extraction is answered at flex."""
    if not pipeline_env["PIPELINE_DATABASE_URL"].startswith("postgresql"):
        pytest.skip("SQLite is one host's file: its host's clock is the only clock (Postgres under CI)")
    write_filings(tmp_path, 2, seed=147, sizes=[8_000] * 2)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        deadline = clock.now(session) + timedelta(minutes=20)
    logs = tmp_path_factory.mktemp("flex-clock")
    with claimed_redis_db(redis_base) as redis_url:
        env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_MODE": "auto",
            "PIPELINE_BATCH_MIN_ROOM_S": "86400",  # no room for a batch: flex, as it fits
            "PIPELINE_BATCH_DEADLINE_MARGIN_S": "60",
        }
        worker = _start(env, logs, "flex-ahead", FLEX_SHIFT_S, clockshift)
        try:
            try:
                embedded.wait_until_ready([worker.child], WORKER_READY_TIMEOUT_S)
            except RuntimeError as exc:
                pytest.fail(str(exc))
            argv = [sys.executable, "-m", "pipeline", "submit", str(tmp_path), "--fresh"]
            submitted = subprocess.run(
                [*argv, "--deadline", deadline.isoformat()],
                env=embedded.child_env(shifted(env, clockshift, FLEX_SHIFT_S)),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert submitted.returncode == 0, submitted.stderr
            run_id = submitted.stdout.strip().splitlines()[-1]
            status = eventually("the run ended", lambda: run_status(engine, run_id), WAIT_S)
        finally:
            embedded.stop_all([worker.child])
    assert status == "completed", worker.log()[-2000:]
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        assert run is not None
        planned = (run.mode, run.extract_tier, run.tier_reason)
        modes = session.scalars(
            select(LLMCall.mode).where(LLMCall.run_id == run_id, LLMCall.stage == "extract")
        ).all()
    assert planned[:2] == ("flex", "flex"), planned
    assert modes and set(modes) == {"flex"}, f"extract calls by tier: {Counter(modes)}"
