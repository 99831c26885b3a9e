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
        every = inspector.get_multi_columns()  # one query for every table's columns, not one each
        for table in sorted(set(inspector.get_table_names()) - {"alembic_version"}):
            columns = every[(None, table)]
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


# Every table of the schema gets rows, and every column of the kept run's rows a value that is
# neither NULL nor its default: a round trip that loses a column's values then shows.
FILL_EVERY_TABLE = (
    # The kept run as a capped batch run the planner sent to flex, resumed once, with a
    # user's schema and what `pipeline plan` estimated (0003, 0005, 0006, 0010, 0015, 0016).
    "update runs set name = 'round trip', reuse_answers = false, resumes = 1, resumed_at = now(),"
    " error = 'one document failed', budget_usd = 5.0, cost_usd = 0.5, schema = 'tests.schemas:Revenue',"
    " mode = 'batch',"
    " mode_reason = 'the deadline leaves time for the Batch API', deadline = now() + interval '1 day',"
    " dispatched_at = now(), batch_polled_at = now(), cutover_at = now(), extract_tier = 'flex',"
    " standard_from = now() + interval '20 hours', tier_reason = 'flex makes the deadline',"
    """ estimate = '{"batch": {"calls": 3, "cost_usd": 0.25}}' where id = :kept""",
    # Its documents leased, reclaimed once, noted, flagged, answered at a tier (0004, 0007, 0011, 0016).
    "update documents set status = 'extracted', attempts = 2, started_at = now(), finished_at = now(),"
    " note = 'decoded as Windows-1252', injection_flag = true, injection_excerpt = 'ignore previous',"
    " lease_owner = 'host:1:w', lease_scope = 'scope', lease_expires_at = now(), fence = 3,"
    " reclaims = 1, reclaimed_from = 'host:2:w', tier = 'batch', tier_reason = 'the run''s mode',"
    " error = 'rate limited, then answered', form_type = '10-K', company_name = 'Acme Corp',"
    " cik = '0000320193', period_of_report = date '2025-12-31', fiscal_year = 2025,"
    " accession_number = '0000320193-26-000001', filing_date = date '2026-02-01' where run_id = :kept",
    "update contents set source_offsets = '[[0, 0], [80, 95]]' where text is not null",
    "insert into llm_batches (run_id, provider_batch_id, input_file_id, output_file_id, error_file_id,"
    " status, requests, completed, failed, enqueued_tokens, estimated_cost_usd, output_lines_done,"
    " error_lines_done, attempts, failures, error, created_at, updated_at, submitted_at, ended_at,"
    " cancelled_at, ingested_at) values (:kept, 'batch_1', 'file_in', 'file_out', 'file_err',"
    " 'ingested', 3, 2, 1, 12000, 0.3, 2, 1, 1, 1, 'one line expired', now(), now(), now(), now(),"
    " now(), now())",
    # Answered chunks, one reused from an earlier run, all sent in the batch (0003, 0004, 0010, 0018).
    """update chunks set result = '{"company": "Acme"}', prompt_version = 'v1', model = 'sim-1',"""
    " completed_at = now(), reused_from = id + 1000, section = 'Item 1A', batch_tries = 1,"
    """ batch_id = (select min(id) from llm_batches), token_p = '{"company": 0.93}'""",
    "insert into synthesis_partials (run_id, text, documents, created_at) values (:kept, 'Acme grew.', 3, now())",
    "insert into extractions (document_id, run_id, company, fiscal_year, revenue_usd, revenue_quote,"
    " revenue_grounded, revenue_quote_start, revenue_quote_end, quotes_total, quotes_grounded, data,"
    " company_confidence, fiscal_year_confidence, revenue_confidence, revenue_match, escalated, summary,"
    " partial_id, model, prompt_version, created_at) select id, run_id, 'Acme', 2025, 1.5e9,"
    """ 'revenue of $1.5 billion', true, 100, 124, 2, 1, '{"company": "Acme"}', 0.9, 0.8, 0.7, 'exact',"""
    " 'revenue_usd', 'Acme grew.', (select min(id) from synthesis_partials), 'sim-1', 'v1', now()"
    " from documents where run_id = :kept",
    "insert into risk_factors (document_id, run_id, position, title, quote, grounded, quote_start,"
    " quote_end, confidence, match) select id, run_id, 0, 'Competition', 'we compete', true, 10, 20,"
    " 0.6, 'normalised' from documents where run_id = :kept",
    "insert into corrections (run_id, document_id, field, position, value, original, reviewer,"
    " reviewed_at, source, created_at) select run_id, id, 'risk_title', 0, 'Rivals', 'Competition',"
    " 'ana', now(), 'review.csv', now() from documents where run_id = :kept",
    "insert into xbrl_facts (document_id, run_id, field, value, concept, context, period_start,"
    " period_end, why) select id, run_id, 'revenue_usd', 1.5e9, 'us-gaap:Revenues', 'FY2025',"
    " date '2025-01-01', date '2025-12-31', 'the duration context of the fiscal year'"
    " from documents where run_id = :kept on conflict (document_id, field) do update set value = 1.5e9,"
    " concept = 'us-gaap:Revenues', context = 'FY2025', period_start = date '2025-01-01',"
    " period_end = date '2025-12-31', why = 'the duration context of the fiscal year'",
    "insert into document_attempts (document_id, run_id, round, status, error, attempts, started_at,"
    " finished_at, retried_at) select id, run_id, 1, 'failed', 'timed out', 3, now(), now(), now()"
    " from documents where run_id = :kept",
    "insert into reports (run_id, markdown, json, created_at) values"
    """ (:kept, '# Acme', '{"documents": 3}', now())""",
)


def _columns_without_a_value(url: str) -> list[str]:
    """`table.column` of every column NULL in all its table's rows (or of a table without rows)."""
    engine = create_engine(url)
    empty = []
    with engine.connect() as conn:
        inspector = inspect(conn)
        for table in sorted(set(inspector.get_table_names()) - {"alembic_version"}):
            for column in inspector.get_columns(table):
                if not conn.scalar(text(f'SELECT count("{column["name"]}") FROM "{table}"')):
                    empty.append(f"{table}.{column['name']}")
    engine.dispose()
    return empty


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
    with a run with documents and a pruned run present, and a row in every table with a value in
    every column; the schema and every row are as before (the round trip of 0013 turned a pruned
    text into '' and lost runs.pruned_at; those of 0002-0018 lost the columns and tables they
    dropped: key slots, costs, leases, batches, tiers, corrections, ...)."""
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
            # A call per document, a batch line on the second key, priced, part of its prompt
            # served from the provider's cache (0002, 0005, 0010, 0022's columns).
            conn.execute(
                text(
                    "insert into llm_calls (run_id, document_id, chunk_idx, stage, model, status,"
                    " prompt_tokens, completion_tokens, latency_ms, cached_tokens, key_slot,"
                    " limiter_wait_ms, cost_usd, mode, sync_cost_usd, error, created_at)"
                    " select run_id, id, 0, 'extract', 'sim-1', 'ok', 4000, 300, 10, 1024 + 128 * id, 1,"
                    " 25, 0.001 * id, 'batch', 0.002 * id, 'retried once', now() from documents"
                )
            )
            for statement in FILL_EVERY_TABLE:
                conn.execute(text(statement), {"kept": kept} if ":kept" in statement else {})
        # A new table or column: give it a value in FILL_EVERY_TABLE (its round trip is tested then).
        assert _columns_without_a_value(url) == [], "columns whose round trip this data would not test"
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
