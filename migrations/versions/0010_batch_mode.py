"""batch mode: llm_batches, the run's mode and deadline, chunks held by a batch, calls' mode

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
WHEN = sa.DateTime(timezone=True)
def _run_columns() -> tuple[sa.Column[Any], ...]:
    return (
    sa.Column("mode", sa.String(length=8), server_default="sync", nullable=False),
    sa.Column("mode_reason", sa.Text(), nullable=True),
    sa.Column("deadline", WHEN, nullable=True),
    sa.Column("dispatched_at", WHEN, nullable=True),
    sa.Column("batch_polled_at", WHEN, nullable=True),
    sa.Column("cutover_at", WHEN, nullable=True),
    )


def _call_columns() -> tuple[sa.Column[Any], ...]:
    return (
        sa.Column("mode", sa.String(length=8), server_default="sync", nullable=False),
        sa.Column("sync_cost_usd", sa.Float(), nullable=True),
    )


def upgrade() -> None:
    op.create_table(
        "llm_batches",
        sa.Column("id", ID_TYPE, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("provider_batch_id", sa.String(length=200), nullable=True),
        sa.Column("input_file_id", sa.String(length=200), nullable=True),
        sa.Column("output_file_id", sa.String(length=200), nullable=True),
        sa.Column("error_file_id", sa.String(length=200), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("completed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("failed", sa.Integer(), server_default="0", nullable=False),
        sa.Column("enqueued_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("output_lines_done", sa.Integer(), server_default="0", nullable=False),
        sa.Column("error_lines_done", sa.Integer(), server_default="0", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", WHEN, nullable=False),
        sa.Column("updated_at", WHEN, nullable=True),
        sa.Column("submitted_at", WHEN, nullable=True),
        sa.Column("ended_at", WHEN, nullable=True),
        sa.Column("cancelled_at", WHEN, nullable=True),
        sa.Column("ingested_at", WHEN, nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_llm_batches_run_id", "llm_batches", ["run_id"], unique=False)
    # Plain ADD COLUMNs (SQLite has them natively): a batch table copy would break the views.
    for column in _run_columns():
        op.add_column("runs", column)
    for column in _call_columns():
        op.add_column("llm_calls", column)
    op.add_column("chunks", sa.Column("batch_tries", sa.Integer(), server_default="0", nullable=False))
    if op.get_bind().dialect.name == "sqlite":
        # ADD COLUMN with REFERENCES: alembic adds no constraint to a SQLite column otherwise.
        op.execute("ALTER TABLE chunks ADD COLUMN batch_id INTEGER REFERENCES llm_batches (id)")
    else:
        op.add_column("chunks", sa.Column("batch_id", ID_TYPE, nullable=True))
        op.create_foreign_key("fk_chunks_batch_id", "chunks", "llm_batches", ["batch_id"], ["id"])
    op.create_index("ix_chunks_batch_id", "chunks", ["batch_id"], unique=False)
    # After a downgrade (migrations/kept.py): a run's batches, its mode and deadline, the
    # chunks a batch holds, the calls' mode and what batch saved.
    kept.put_back_table(revision, "llm_batches", BATCH_COLUMNS, {"run_id": "runs"})
    for table, names in KEPT.items():
        kept.put_back(revision, table, "id", names)


KEPT = {
    "chunks": ["batch_id", "batch_tries"],
    "llm_calls": [c.name for c in _call_columns()],
    "runs": [c.name for c in _run_columns()],
}
BATCH_COLUMNS = [
    "id",
    "run_id",
    "provider_batch_id",
    "input_file_id",
    "output_file_id",
    "error_file_id",
    "status",
    "requests",
    "completed",
    "failed",
    "enqueued_tokens",
    "output_lines_done",
    "error_lines_done",
    "attempts",
    "failures",
    "error",
    "created_at",
    "updated_at",
    "submitted_at",
    "ended_at",
    "cancelled_at",
    "ingested_at",
]


def downgrade() -> None:
    kept.keep_table(revision, "llm_batches")
    kept.keep(revision, "chunks", "id", KEPT["chunks"], where="batch_id IS NOT NULL OR batch_tries <> 0")
    kept.keep(
        revision, "llm_calls", "id", KEPT["llm_calls"], where="mode <> 'sync' OR sync_cost_usd IS NOT NULL"
    )
    kept.keep(
        revision,
        "runs",
        "id",
        KEPT["runs"],
        where="mode <> 'sync' OR "
        + " OR ".join(f"{name} IS NOT NULL" for name in KEPT["runs"] if name != "mode"),
    )
    op.drop_index("ix_chunks_batch_id", table_name="chunks")
    sqlite = op.get_bind().dialect.name == "sqlite"
    if not sqlite:
        op.drop_constraint("fk_chunks_batch_id", "chunks", type_="foreignkey")
    for table, names in (
        ("chunks", ["batch_id", "batch_tries"]),
        ("llm_calls", [c.name for c in _call_columns()]),
        ("runs", [c.name for c in _run_columns()]),
    ):
        for name in names:
            if sqlite:  # SQLite 3.35+, no table copy (a copy would break the views)
                op.execute(f"ALTER TABLE {table} DROP COLUMN {name}")
            else:
                op.drop_column(table, name)
    op.drop_index("ix_llm_batches_run_id", table_name="llm_batches")
    op.drop_table("llm_batches")
