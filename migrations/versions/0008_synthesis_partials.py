"""partial syntheses made while a run extracts: synthesis_partials, extractions.partial_id

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "synthesis_partials",
        sa.Column("id", ID_TYPE, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("documents", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_synthesis_partials_run_id", "synthesis_partials", ["run_id"], unique=False)
    # After a downgrade (migrations/kept.py): a run's partials.
    kept.put_back_table(revision, "synthesis_partials", PARTIAL_COLUMNS, {"run_id": "runs"})
    if "partial_id" in _columns("extractions"):
        pass  # a SQLite downgrade left it
    elif op.get_bind().dialect.name == "sqlite":
        # ADD COLUMN with REFERENCES: alembic adds no constraint to a SQLite column otherwise.
        op.execute(
            "ALTER TABLE extractions ADD COLUMN partial_id INTEGER "
            "REFERENCES synthesis_partials (id)"
        )
    else:
        op.add_column("extractions", sa.Column("partial_id", ID_TYPE, nullable=True))
        op.create_foreign_key(
            "fk_extractions_partial_id",
            "extractions",
            "synthesis_partials",
            ["partial_id"],
            ["id"],
        )
    op.create_index("ix_extractions_run_partial", "extractions", ["run_id", "partial_id"], unique=False)
    # After a downgrade (migrations/kept.py): the summaries the partials took in (the final
    # synthesis reads those partials instead of the summaries).
    kept.put_back(revision, "extractions", "id", ["partial_id"])


PARTIAL_COLUMNS = ["id", "run_id", "text", "documents", "created_at"]


def downgrade() -> None:
    kept.keep_table(revision, "synthesis_partials")
    kept.keep(revision, "extractions", "id", ["partial_id"], where="partial_id IS NOT NULL")
    op.drop_index("ix_extractions_run_partial", table_name="extractions")
    if op.get_bind().dialect.name != "sqlite":
        op.drop_constraint("fk_extractions_partial_id", "extractions", type_="foreignkey")
        op.drop_column("extractions", "partial_id")
    else:  # SQLite keeps the column (dropping it needs a table copy, which breaks the views)
        op.execute("UPDATE extractions SET partial_id = NULL")
    op.drop_index("ix_synthesis_partials_run_id", table_name="synthesis_partials")
    op.drop_table("synthesis_partials")


def _columns(table: str) -> set[str]:
    return {column["name"] for column in sa.inspect(op.get_bind()).get_columns(table)}
