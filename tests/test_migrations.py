"""Migrations build the schema from empty on Postgres and SQLite, and match the models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from pipeline.storage.db import (
    SCHEMA_HEAD,
    alembic_config,
    dispose_engines,
    get_engine,
    session_scope,
    upgrade,
)
from pipeline.storage.models import Base, Run
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
