"""`pipeline resume` finishes a run whose messages were lost."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select, update

from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.runs.resume import plan_resume
from pipeline.runtime.embedded import Child
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, Report, utcnow
from pipeline_dev.synth_filings import write_filings
from tests.conftest import run_cli


def test_a_run_whose_messages_were_lost_is_finished_by_resume(
    pipeline_env: dict[str, str], workers: list[Child], tmp_path: Path
) -> None:
    write_filings(tmp_path, 3, seed=41, sizes=[22_000] * 3)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    # Stored but never enqueued: what a broker that lost its queue leaves behind.
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])

    result = run_cli("resume", plan.run_id[:10], "--wait", env=pipeline_env)
    assert result.returncode == 0, result.stderr
    assert "3 documents enqueued again" in result.stderr
    with session_scope(engine) as session:
        statuses = dict(
            session.execute(
                select(Document.status, func.count())
                .where(Document.run_id == plan.run_id)
                .group_by(Document.status)
            ).all()
        )
        assert statuses == {"extracted": 3}
        assert session.scalar(select(func.count()).where(Report.run_id == plan.run_id)) == 1

    again = run_cli("resume", plan.run_id, env=pipeline_env)
    assert again.returncode == 0
    assert "nothing to resume" in again.stderr


def test_only_pending_and_stale_running_documents_are_enqueued_again(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    write_filings(tmp_path, 3, seed=43, sizes=[22_000] * 3)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    fresh, stale, pending = plan.document_ids
    with session_scope(engine) as session:
        session.execute(
            update(Document).where(Document.id == fresh).values(status="running", started_at=utcnow())
        )
        session.execute(
            update(Document)
            .where(Document.id == stale)
            .values(status="running", started_at=utcnow() - timedelta(hours=1))
        )
    resumed = plan_resume(engine, plan.run_id, stale_after_s=600)
    assert sorted(resumed.document_ids) == sorted([stale, pending])
    assert resumed.left_running == 1


def test_resume_of_an_unknown_run_fails_clearly(pipeline_env: dict[str, str]) -> None:
    result = run_cli("resume", "no-such-run", env=pipeline_env)
    assert result.returncode == 2
    assert "no run matches 'no-such-run'" in result.stderr
