"""What a downgrade drops and its upgrade needs back: kept aside, then put back.

A downgrade that drops columns or a table copies what they hold into `kept_<revision>_<table>`
first (a plain table of the older schema no code reads); the upgrade of the same revision, run
again, puts it back and drops the copy. A round trip (downgrade one step, upgrade again) then
loses nothing: a run keeps its `stored_at` (or `retry` refuses it forever as still being stored),
a pruned run its `pruned_at` (or `retry` runs documents whose texts are gone). A database that
never had the columns has no copy: the upgrade adds them empty, as before.

Plain SQL (CREATE TABLE AS, correlated UPDATE): Postgres and SQLite alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


def name(revision: str, table: str) -> str:
    return f"kept_{revision}_{table}"


def _exists(table: str) -> bool:
    return sa.inspect(op.get_bind()).has_table(table)


def keep(revision: str, table: str, key: str, columns: Sequence[str], where: str | None = None) -> None:
    """Before `columns` of `table` are dropped: copy them with the rows' `key` (of the rows
    `where` says, else of every row)."""
    copy = name(revision, table)
    op.execute(f"DROP TABLE IF EXISTS {copy}")
    listed = ", ".join([key, *columns])
    op.execute(f"CREATE TABLE {copy} AS SELECT {listed} FROM {table}" + (f" WHERE {where}" if where else ""))


def put_back(revision: str, table: str, key: str, columns: Sequence[str], where: str | None = None) -> bool:
    """Once `columns` of `table` are back: their values where `keep` copied them (of the rows
    still there, and `where` says); whether there was a copy."""
    copy = name(revision, table)
    if not _exists(copy):
        return False
    values = ", ".join(f"{c} = (SELECT k.{c} FROM {copy} k WHERE k.{key} = {table}.{key})" for c in columns)
    condition = f"{key} IN (SELECT {key} FROM {copy})" + (f" AND {where}" if where else "")
    op.execute(f"UPDATE {table} SET {values} WHERE {condition}")
    op.execute(f"DROP TABLE {copy}")
    return True


def keep_table(revision: str, table: str) -> None:
    """Before `table` is dropped: copy its rows."""
    copy = name(revision, table)
    op.execute(f"DROP TABLE IF EXISTS {copy}")
    op.execute(f"CREATE TABLE {copy} AS SELECT * FROM {table}")


def put_back_table(revision: str, table: str, columns: Sequence[str], parents: dict[str, str]) -> bool:
    """Once `table` is made again: the rows `keep_table` copied whose parents are still there
    (`parents`: column -> the table its id names), with their ids (a Postgres sequence is moved
    past them); whether there was a copy."""
    copy = name(revision, table)
    if not _exists(copy):
        return False
    listed = ", ".join(columns)
    still = " AND ".join(f"{column} IN (SELECT id FROM {parent})" for column, parent in parents.items())
    op.execute(
        f"INSERT INTO {table} ({listed}) SELECT {listed} FROM {copy}" + (f" WHERE {still}" if still else "")
    )
    if op.get_bind().dialect.name == "postgresql" and "id" in columns:
        op.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), max(id)) FROM {table} HAVING max(id) IS NOT NULL"
        )
    op.execute(f"DROP TABLE {copy}")
    return True
