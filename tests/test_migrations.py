"""Migrations build the schema from empty on Postgres and SQLite, and match the models."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, select, text, update

from pipeline.storage.db import (
    SCHEMA_HEAD,
    alembic_config,
    dispose_engines,
    get_engine,
    session_scope,
    upgrade,
)
from pipeline.storage.models import Base, Content, Document, Run
from tests.conftest import new_database

PUBLIC_TABLES = {"runs", "documents", "extractions", "risk_factors", "llm_calls", "reports"}


def _assert_matches_models(url: str) -> None:
    upgrade(url)
    engine = create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
        tables = set(inspect(conn).get_table_names())
    engine.dispose()
    dispose_engines()
    assert diff == [], diff
    assert tables >= PUBLIC_TABLES


def test_sqlite_upgrades_from_empty_and_matches_the_models(tmp_path: Path) -> None:
    _assert_matches_models(f"sqlite:///{tmp_path / 'fresh.db'}")


def test_postgres_upgrades_from_empty_and_matches_the_models(postgres_url: str | None) -> None:
    if postgres_url is None:
        pytest.skip("no Postgres server reachable")
    with new_database(postgres_url, "pipeline_migrate") as url:
        _assert_matches_models(url)


def _revisions(url: str) -> list[str]:
    """The rows of alembic_version: one, the head, once migrated."""
    engine = create_engine(url)
    with engine.connect() as conn:
        revisions = list(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())
    engine.dispose()
    return revisions


def _head(url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(url)).get_current_head()


def test_upgrade_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'twice.db'}"
    upgrade(url)
    with session_scope(get_engine(url)) as session:
        session.add(Run(id="kept", query="q", model="m", prompt_version="p"))
    upgrade(url)
    assert _revisions(url) == [_head(url)]
    with session_scope(get_engine(url)) as session:
        assert session.get(Run, "kept") is not None, "a second upgrade keeps the data"
    dispose_engines()
    _assert_matches_models(url)


def test_processes_starting_together_migrate_once(tmp_path: Path) -> None:
    """Workers that start at the same time all apply pending migrations safely."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'together.db'}"
    env = {**os.environ, "PIPELINE_DATABASE_URL": url}
    processes = [
        subprocess.Popen([sys.executable, "-m", "pipeline", "db", "upgrade"], env=env, stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    assert [p.wait(120) for p in processes] == [0, 0, 0, 0], [p.stderr.read() for p in processes if p.stderr]
    assert _revisions(url) == [_head(url)]
    _assert_matches_models(url)


def test_the_schema_head_the_commands_check_first_is_alembics_newest() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_heads() == [SCHEMA_HEAD], "a new migration: set pipeline.storage.db.SCHEMA_HEAD to it"


# --- every migration's round trip, with data present ------------------------------------------

ROUND_TRIP_FILES = 3


def _migrate(url: str, direction: str, revision: str) -> None:
    """`alembic upgrade|downgrade REVISION`, as an operator runs it (one transaction)."""
    from alembic import command

    cfg = alembic_config(url)
    engine = get_engine(url)
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        getattr(command, direction)(cfg, revision)


def _snapshot(url: str) -> dict[str, object]:
    """Every table's columns (name, type, nullable) and rows, in a stable order."""
    engine = create_engine(url)
    found: dict[str, object] = {}
    with engine.connect() as conn:
        inspector = inspect(conn)
        for table in sorted(set(inspector.get_table_names()) - {"alembic_version"}):
            columns = inspector.get_columns(table)
            names = sorted(column["name"] for column in columns)
            shape = sorted((c["name"], str(c["type"]), bool(c["nullable"])) for c in columns)
            listed = ", ".join(f'"{name}"' for name in names)
            rows = conn.execute(text(f'SELECT {listed} FROM "{table}"')).tuples()
            found[table] = (shape, sorted(map(repr, rows)))
    engine.dispose()
    return found


def _difference(before: object, after: object) -> str:
    """What a round trip changed of a table: columns, then the first row that differs."""
    if after is None:
        return "dropped"
    assert isinstance(before, tuple) and isinstance(after, tuple)
    if before[0] != after[0]:
        return f"columns {sorted(set(before[0]) ^ set(after[0]))}"
    changed = sorted(set(before[1]) ^ set(after[1]))
    return f"rows {changed[:2]}"


def _runs_with_data(url: str, base: Path) -> tuple[str, str]:
    """A completed run with documents (texts, chunks) and a completed run pruned since: their ids."""
    from pipeline.core.settings import Settings
    from pipeline.ingest.producer import prepare_run
    from pipeline.runs.retention import prune_runs
    from pipeline.storage import clock
    from pipeline_dev.synth_filings import write_filings

    engine = get_engine(url)
    settings = Settings(_env_file=None, database_url=url)  # type: ignore[call-arg]
    ids = []
    for name, seed in (("kept", 11), ("pruned", 12)):
        write_filings(base / name, ROUND_TRIP_FILES, seed=seed, sizes=[9_000] * ROUND_TRIP_FILES)
        ids.append(prepare_run(engine, settings, [str(base / name)]).run_id)
    kept, pruned = ids
    with session_scope(engine) as session:
        now = clock.now(session)
        for run_id, ended in ((kept, now), (pruned, now - timedelta(days=100))):
            session.execute(
                update(Run)
                .where(Run.id == run_id)
                .values(status="completed", created_at=ended, finished_at=ended)
            )
    outcome = prune_runs(engine, timedelta(days=50).total_seconds())
    assert [run.run_id for run in outcome.pruned] == [pruned]
    return kept, pruned


def test_every_migrations_round_trip_keeps_what_its_upgrade_needs(
    postgres_url: str | None, tmp_path: Path
) -> None:
    """For each revision, from the newest down: downgrade one step and upgrade again, on Postgres
    with a run with documents and a pruned run present; the schema and every row are as before
    (the round trip of 0013 turned a pruned text into '' and lost runs.pruned_at)."""
    if postgres_url is None:
        pytest.skip("no Postgres server reachable")
    with new_database(postgres_url, "pipeline_round_trip") as url:
        upgrade(url)
        kept, pruned = _runs_with_data(url, tmp_path)
        engine = get_engine(url)
        with engine.begin() as conn:  # as a submit with traces on stores it (0014's column)
            conn.execute(
                text(
                    "update documents set trace_parent = '00-' || lpad(id::text, 32, '0') || '-0000000000000001-01'"
                )
            )
            # A call per document, part of its prompt served from the provider's cache (0022's
            # column). Its cost stays NULL: 0005's round trip drops llm_calls.cost_usd, a loss of
            # its own that this data would report on every revision.
            conn.execute(
                text(
                    "insert into llm_calls (run_id, document_id, chunk_idx, stage, model, status,"
                    " prompt_tokens, completion_tokens, latency_ms, cached_tokens, created_at)"
                    " select run_id, id, 0, 'extract', 'sim-1', 'ok', 4000, 300, 10, 1024 + 128 * id, now()"
                    " from documents"
                )
            )
        script = ScriptDirectory.from_config(alembic_config(url))
        lost = []
        for revision in script.walk_revisions():  # newest first
            below = revision.down_revision
            if below is None:  # 0001's downgrade drops the schema: nothing to keep
                continue
            assert isinstance(below, str)
            before = _snapshot(url)
            _migrate(url, "downgrade", below)
            _migrate(url, "upgrade", revision.revision)
            after = _snapshot(url)
            lost += [
                f"{revision.revision}: {table} {_difference(before[table], after.get(table))}"
                for table in before
                if before[table] != after.get(table)
            ]
            _migrate(url, "downgrade", below)
        assert lost == [], "a downgrade lost what its upgrade needs:\n" + "\n".join(lost)
        upgrade(url)
        engine = get_engine(url)
        with session_scope(engine) as session:
            pruned_at = session.scalar(select(Run.pruned_at).where(Run.id == pruned))
            texts = dict(
                session.execute(
                    select(Document.run_id, Content.text).join(Content, Content.sha256 == Document.sha256)
                ).all()
            )
        assert pruned_at is not None, "retry refuses the pruned run again"
        assert texts[pruned] is None and texts[kept], "a pruned text is NULL, a kept one whole"


def test_an_empty_stored_text_is_refilled_by_a_submit_and_never_extracted(
    database_url: str, tmp_path: Path
) -> None:
    """A text the old 0013 downgrade left as '' (a database migrated before the fix): a worker
    refuses it, naming why, instead of extracting nothing; a new submit of the file stores it again."""
    from pipeline.core.errors import PermanentError, TextUnavailable
    from pipeline.core.settings import Settings
    from pipeline.ingest.producer import prepare_run
    from pipeline.storage import documents
    from pipeline_dev.synth_filings import write_filings

    upgrade(database_url)
    engine = get_engine(database_url)
    settings = Settings(_env_file=None, database_url=database_url)  # type: ignore[call-arg]
    write_filings(tmp_path / "one", 1, seed=4711, sizes=[9_000])
    first = prepare_run(engine, settings, [str(tmp_path / "one")]).run_id
    with session_scope(engine) as session:
        doc = session.scalars(select(Document).where(Document.run_id == first)).one()
        whole = session.scalar(select(Content.text).where(Content.sha256 == doc.sha256))
        session.execute(update(Content).where(Content.sha256 == doc.sha256).values(text=""))
    with session_scope(engine) as session, pytest.raises(TextUnavailable, match="stored empty") as refused:
        documents.text_and_run(session, doc)
    assert isinstance(refused.value, PermanentError), "the document fails with the reason, not silently"
    prepare_run(engine, settings, [str(tmp_path / "one")])
    with session_scope(engine) as session:
        assert whole and session.scalar(select(Content.text).where(Content.sha256 == doc.sha256)) == whole
        assert documents.text_and_run(session, doc)[0] == whole
