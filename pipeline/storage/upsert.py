"""One upsert for Postgres and SQLite: every write the pipeline makes is safe to repeat."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.storage.models import (
    Base,
)


def upsert(
    session: Session,
    model: type[Base],
    rows: Sequence[dict[str, Any]],
    key: Sequence[str],
    update_columns: Sequence[str] = (),
) -> None:
    """INSERT … ON CONFLICT (key) DO UPDATE/NOTHING, on Postgres and SQLite alike."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(model).values(list(rows))
    if update_columns:
        stmt = stmt.on_conflict_do_update(
            index_elements=list(key),
            set_={column: stmt.excluded[column] for column in update_columns},
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(key))
    session.execute(stmt)
