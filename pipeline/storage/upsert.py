"""One upsert for Postgres and SQLite: every write the pipeline makes is safe to repeat."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.storage.models import Base, table_of


def upsert(
    session: Session,
    model: type[Base],
    rows: Sequence[dict[str, Any]],
    key: Sequence[str],
    update_columns: Sequence[str] = (),
) -> None:
    """INSERT … ON CONFLICT (key) DO UPDATE/NOTHING, on Postgres and SQLite alike (`rows`
    all have the same columns)."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    session.execute(_statement(dialect, model, tuple(key), tuple(update_columns)), list(rows))


@lru_cache(maxsize=64)
def _statement(
    dialect: str, model: type[Base], key: tuple[str, ...], update_columns: tuple[str, ...]
) -> Insert:
    """Built once per shape: the rows go as parameters (one statement for many on Postgres)."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(table_of(model))
    if update_columns:
        return stmt.on_conflict_do_update(
            index_elements=list(key), set_={column: stmt.excluded[column] for column in update_columns}
        )
    return stmt.on_conflict_do_nothing(index_elements=list(key))
