"""`pipeline prune`: an old final run loses its filing texts, chunks and call rows and keeps its
extractions, risk factors and report; a text that another run still uses stays; a run that is
not final is never touched, whatever its age; `--dry-run` changes nothing; a repeat is a no-op;
`status` and `report` of the pruned run still work; `--all` deletes it whole. Beat sends the
prune only when PIPELINE_RETENTION_DAYS is set, and the task prunes. On the session's database
(Postgres under CI) with its real workers and simulator."""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery
from celery.schedules import crontab
from click.testing import CliRunner, Result
from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.orm import Session

from pipeline.cli import main
from pipeline.core.constants import REPORT_QUEUE
from pipeline.core.settings import Settings, get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.runs.retention import duration_words, parse_duration
from pipeline.runtime.embedded import Child
from pipeline.storage import clock, intake, retention
from pipeline.storage.db import session_scope
from pipeline.storage.models import (
    Chunk,
    Content,
    Document,
    Extraction,
    LLMCall,
    Report,
    RiskFactor,
    Run,
)
from pipeline_dev.synth_filings import write_filings
from tests.commands import outputs_of
from tests.conftest import run_cli
from workers.app import beat_schedule

AGE = timedelta(days=100)


@dataclass(frozen=True)
class Runs:
    old: str
    """Final, 100 days old: filings a, b, c."""
    newer: str
    """Final, recent: c again (the same content) and d."""
    unfinished: str
    """Running (never sent to workers), 100 days old: b again and e."""
    sha: dict[str, str]
    """File letter -> content hash."""


def _submit_together(env: dict[str, str], *directories: Path) -> list[str]:
    """`pipeline submit DIR --wait` of each directory at once, as separate processes: their runs' ids."""
    commands = [["submit", str(d), "--wait"] for d in directories]
    outputs = outputs_of(env, commands, directories[0].parent)
    return [out.strip().splitlines()[-1] for out, _ in outputs]


def prune(*args: str) -> Result:
    """`pipeline prune ARGS` in this process (the session's environment), as a user types it."""
    get_settings.cache_clear()
    return CliRunner().invoke(main, ["prune", *args], prog_name="pipeline")


def _age(engine: Engine, *run_ids: str) -> None:
    """The runs were created, started and ended AGE ago (on the database's clock)."""
    with session_scope(engine) as session:
        then = clock.now(session) - AGE
        for run_id in run_ids:
            run = session.get(Run, run_id)
            assert run is not None
            ended = then if run.finished_at is not None else None
            session.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(created_at=then, started_at=then, finished_at=ended)
            )


def _copy(source: Path, names: list[str], to: Path) -> Path:
    to.mkdir()
    for name in names:
        shutil.copy(source / name, to / name)
    return to


@pytest.fixture(scope="module")
def runs(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path_factory: pytest.TempPathFactory
) -> Runs:
    base = tmp_path_factory.mktemp("prune")
    every = base / "every"
    write_filings(every, 5, seed=2917, sizes=[21_000] * 5)
    files = sorted(p.name for p in every.iterdir() if p.suffix == ".txt")
    letter = dict(zip("abcde", files, strict=True))
    engine = _engine(pipeline_env)
    old, newer = _submit_together(
        pipeline_env,
        _copy(every, [letter[x] for x in "abc"], base / "old"),
        _copy(every, [letter[x] for x in "cd"], base / "newer"),
    )
    plan = prepare_run(
        engine, get_settings(), [str(_copy(every, [letter[x] for x in "be"], base / "unfinished"))]
    )
    _age(engine, old, plan.run_id)
    with session_scope(engine) as session:
        sha = {
            x: session.scalar(select(Document.sha256).where(Document.path.endswith("/" + letter[x])).limit(1))
            for x in "abcde"
        }
    yield Runs(old, newer, plan.run_id, {x: str(h) for x, h in sha.items()})
    with session_scope(engine) as session:
        intake.delete_run(session, plan.run_id)


def _engine(env: dict[str, str]) -> Engine:
    from pipeline.storage.db import get_engine

    return get_engine(env["PIPELINE_DATABASE_URL"])


def _rows(engine: Engine, run_id: str) -> dict[str, int]:
    """The run's rows in each table a prune may touch."""
    docs = select(Document.id).where(Document.run_id == run_id)
    with session_scope(engine) as session:

        def count(model: type, where: object) -> int:
            return int(session.scalar(select(func.count()).select_from(model).where(where)) or 0)

        return {
            "runs": count(Run, Run.id == run_id),
            "documents": count(Document, Document.run_id == run_id),
            "chunks": count(Chunk, Chunk.document_id.in_(docs)),
            "calls": count(LLMCall, LLMCall.run_id == run_id),
            "extractions": count(Extraction, Extraction.run_id == run_id),
            "risk_factors": count(RiskFactor, RiskFactor.run_id == run_id),
            "reports": count(Report, Report.run_id == run_id),
        }


def _texts(engine: Engine, runs: Runs) -> dict[str, str]:
    """Per filing letter: "text" (stored), "pruned" (row kept, text NULL) or "gone" (no row)."""
    with session_scope(engine) as session:
        found = dict(
            list(
                session.execute(
                    select(Content.sha256, Content.text.is_not(None)).where(
                        Content.sha256.in_(runs.sha.values())
                    )
                ).tuples()
            )
        )
    return {x: "gone" if h not in found else "text" if found[h] else "pruned" for x, h in runs.sha.items()}


def _snapshot(engine: Engine, runs: Runs) -> tuple[object, ...]:
    return (*(_rows(engine, r) for r in (runs.old, runs.newer, runs.unfinished)), _texts(engine, runs))


def test_prune_drops_an_old_runs_texts_chunks_and_calls_and_keeps_what_it_found(
    pipeline_env: dict[str, str], runs: Runs, engine: Engine, tmp_path: Path
) -> None:
    before = _snapshot(engine, runs)
    old_before, newer_before, unfinished_before = (
        _rows(engine, r) for r in (runs.old, runs.newer, runs.unfinished)
    )
    assert old_before["chunks"] >= 3 and old_before["calls"] > old_before["chunks"]  # and the report's
    assert old_before["extractions"] == 3 and old_before["risk_factors"] > 0 and old_before["reports"] == 1
    assert unfinished_before["chunks"] > 0 and _texts(engine, runs) == dict.fromkeys("abcde", "text")
    old_status = json.loads(run_cli("status", runs.old, "--json", env=pipeline_env).stdout)

    dry = prune("--older-than", "90d", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would be pruned (--dry-run: nothing is changed)" in dry.stdout
    assert f"{runs.old[:8]} (completed, ended " in dry.stdout
    assert "would delete, of 1 run that ended before " in dry.stdout
    assert "1 filing text (" in dry.stdout and f"{old_before['chunks']} chunks (" in dry.stdout, dry.stdout
    assert "2 texts kept: other runs that keep theirs have the same filings" in dry.stdout
    assert (
        f"left alone: 1 old run that is not final (never pruned, whatever the age): {runs.unfinished[:8]} (running)"
        in dry.stdout
    )
    assert _snapshot(engine, runs) == before, "--dry-run changed nothing"

    pruned = prune("--older-than", "90d")
    assert pruned.exit_code == 0, pruned.output
    assert "deleted, of 1 run that ended before " in pruned.stdout
    assert "1 filing text (" in pruned.stdout and f"{old_before['calls']} LLM call rows (" in pruned.stdout
    assert "kept: their extractions, risk factors and reports" in pruned.stdout
    assert f"{runs.unfinished[:8]} (running)" in pruned.stdout
    assert "once VACUUM has been through the tables" in pruned.stdout or "SQLite reuses" in pruned.stdout
    # a: only the old run had it. b: the unfinished run has it too; c: the newer run.
    assert _texts(engine, runs) == {"a": "pruned", "b": "text", "c": "text", "d": "text", "e": "text"}
    assert _rows(engine, runs.old) == {**old_before, "chunks": 0, "calls": 0}
    assert _rows(engine, runs.newer) == newer_before and _rows(engine, runs.unfinished) == unfinished_before
    with session_scope(engine) as session:
        run = session.get(Run, runs.old)
        assert run is not None and run.pruned_at is not None and run.pruned is not None
        assert run.pruned["complete"] is True and run.pruned["deleted"]["texts"] == 1
        assert run.status == "completed"

    after = _snapshot(engine, runs)
    again = prune("--older-than", "90d")
    assert again.exit_code == 0, again.output
    assert "none: no final run that ended before" in again.stdout
    assert _snapshot(engine, runs) == after, "a repeat changes nothing"

    shown = run_cli("status", runs.old, env=pipeline_env)
    assert shown.returncode == 0, shown.stderr
    assert "filing texts, chunks and call rows deleted" in " ".join(shown.stdout.split())
    found = json.loads(run_cli("status", runs.old, "--json", env=pipeline_env).stdout)
    assert found["pruned_at"] and found["documents"] == {"extracted": 3}
    kept = ("llm_calls", "prompt_tokens", "completion_tokens", "cost_usd", "chunks_total", "chunks_done")
    assert {k: found[k] for k in kept} == {k: old_status[k] for k in kept}, "status shows what the run had"
    report = run_cli("report", runs.old, env=pipeline_env)
    assert report.returncode == 0 and report.stdout.startswith("# "), report.stderr
    assert f"run {runs.old} was pruned on " in report.stderr
    page = run_cli("report", runs.old, "-o", str(tmp_path / "old.html"), env=pipeline_env)
    assert page.returncode == 0, page.stderr
    html = (tmp_path / "old.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "call rows were deleted by `pipeline prune` on" in html

    retried = run_cli("retry", runs.old, env=pipeline_env)
    assert retried.returncode == 2 and "was pruned on" in retried.stderr, retried.stderr

    refused = prune("--older-than", "90d", "--all")  # no terminal to ask on
    assert refused.exit_code == 2 and "add --yes to go on" in refused.stderr, refused.output
    whole = prune("--older-than", "90d", "--all", "--yes")
    assert whole.exit_code == 0, whole.output
    assert "and whole: 3 documents, 3 extractions" in whole.stdout, whole.stdout
    assert _rows(engine, runs.old) == dict.fromkeys(old_before, 0)
    assert _texts(engine, runs) == {"a": "gone", "b": "text", "c": "text", "d": "text", "e": "text"}
    assert _rows(engine, runs.unfinished) == unfinished_before and _rows(engine, runs.newer) == newer_before


def test_a_text_a_submit_is_storing_stays_and_one_pruned_is_stored_again(engine: Engine) -> None:
    """The race of a prune with a submit of the same filing, on Postgres's row locks: a submit
    that has stored the content (its transaction open) holds the row, so the prune leaves the
    text; once pruned, the next submit of the filing writes the text again."""
    if engine.dialect.name != "postgresql":
        pytest.skip("row locks are Postgres's (SQLite has one writer at a time)")
    sha, text, run_id = uuid.uuid4().hex * 2, "Item 7. Revenue was $5.0 million. " * 100, uuid.uuid4().hex
    with session_scope(engine) as session:
        intake.create_run(
            session, run_id, name=None, query="q", model="m", prompt_version="p", simulated=True
        )
        intake.store_content(session, sha, text, len(text))
        intake.add_document(session, run_id, "/inbox/a.txt", sha256=sha, size_bytes=len(text))
        session.execute(update(Run).where(Run.id == run_id).values(pruned_at=clock.now(session)))

    def stored() -> str | None:
        with session_scope(engine) as session:
            return session.scalar(select(Content.text).where(Content.sha256 == sha))

    try:
        with Session(engine) as submit, submit.begin():
            intake.store_content(submit, sha, text, len(text))  # and its document would follow
            with session_scope(engine) as pruning:
                assert retention.drop_texts(pruning, [sha]).texts_kept == 1
        assert stored() == text
        with session_scope(engine) as pruning:
            assert retention.drop_texts(pruning, [sha]).texts == 1
        assert stored() is None
        with session_scope(engine) as session:
            intake.store_content(session, sha, text, len(text))
        assert stored() == text
    finally:
        with session_scope(engine) as session:
            intake.delete_run(session, run_id)
            session.execute(delete(Content).where(Content.sha256 == sha))


def test_the_nightly_prune_task_prunes_on_a_worker(
    pipeline_env: dict[str, str], runs: Runs, engine: Engine
) -> None:
    """The newer run, aged too: the task (as beat sends it) prunes it, and c's text, which no run
    keeping its texts has any more, goes with it."""
    _age(engine, runs.newer)
    url = pipeline_env["PIPELINE_REDIS_URL"]
    sender = Celery(broker=url, backend=url)
    try:
        done = sender.send_task("pipeline.prune", (90 * 86_400,), queue=REPORT_QUEUE).get(timeout=60)
    finally:
        sender.close()
    assert runs.newer in done["runs"] and runs.unfinished in done["left"], done
    assert _rows(engine, runs.newer)["chunks"] == 0 and _rows(engine, runs.newer)["calls"] == 0
    assert _texts(engine, runs)["c"] == "pruned" and _texts(engine, runs)["b"] == "text"


def test_beat_sends_the_prune_only_with_a_retention_set() -> None:
    assert "prune" not in beat_schedule(Settings(_env_file=None))  # type: ignore[call-arg]
    nightly = beat_schedule(Settings(_env_file=None, retention_days=30))  # type: ignore[call-arg]
    assert nightly["prune"]["task"] == "pipeline.prune"
    assert nightly["prune"]["args"] == (30 * 86_400,)
    assert nightly["prune"]["schedule"] == crontab(minute="15", hour="4")


@pytest.mark.parametrize("given", ["3x", "90", "d", "-1d", "90 days", ""])
def test_a_bad_age_is_refused_with_the_forms_accepted(given: str) -> None:
    with pytest.raises(ValueError, match="is not a duration: give a number and a unit, as in 90d"):
        parse_duration(given)


def test_ages_read_as_the_operator_wrote_them() -> None:
    assert [parse_duration(x) for x in ("90d", "12h", "2w", "30m", "45s", "1.5d", "2y")] == [
        90 * 86_400,
        12 * 3600,
        14 * 86_400,
        1800,
        45,
        1.5 * 86_400,
        730 * 86_400,  # docs/retention.md's example: a year is 365 days
    ]
    assert [duration_words(parse_duration(x)) for x in ("90d", "2w", "12h", "1d", "2y", "365d")] == [
        "90 days",
        "2 weeks",
        "12 hours",
        "1 day",
        "2 years",
        "1 year",
    ]


def test_the_retention_pages_two_years_is_accepted(pipeline_env: dict[str, str]) -> None:
    done = prune("--older-than", "2y", "--dry-run")  # docs/retention.md, as written
    assert done.exit_code == 0, done.output
    assert "final runs that ended more than 2 years ago" in done.output


def test_prune_with_a_bad_age_or_none_exits_2_with_a_sentence(pipeline_env: dict[str, str]) -> None:
    bad = run_cli("prune", "--older-than", "3 months", env=pipeline_env)  # as a process: its exit code
    assert bad.returncode == 2
    assert (
        "Invalid value for '--older-than': '3 months' is not a duration: give a number and a unit"
        in bad.stderr
    )
    unset = prune()
    assert unset.exit_code == 2
    assert "say how old a run must be: --older-than 90d (or set PIPELINE_RETENTION_DAYS)" in unset.stderr
