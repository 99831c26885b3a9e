"""Three tiers: runs.extract_tier, runs.standard_from and runs.tier_reason (the tier a run's
synchronous extract calls go at, flex or standard, and from when flex gives way to the standard
tier to make the deadline); documents.tier and tier_reason (which tier answered the document,
and why)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("extract_tier", sa.String(8), nullable=True))
        batch.add_column(sa.Column("standard_from", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("tier_reason", sa.Text(), nullable=True))
    op.execute("update runs set extract_tier = 'flex' where mode = 'flex'")  # flex runs before 0016
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("tier", sa.String(8), nullable=True))
        batch.add_column(sa.Column("tier_reason", sa.Text(), nullable=True))
    # After a downgrade (migrations/kept.py): the runs' tiers and the documents' (the report's
    # per-tier figures read them).
    kept.put_back(revision, "runs", "id", RUN_COLUMNS)
    kept.put_back(revision, "documents", "id", DOCUMENT_COLUMNS)


RUN_COLUMNS = ["extract_tier", "standard_from", "tier_reason"]
DOCUMENT_COLUMNS = ["tier", "tier_reason"]


def downgrade() -> None:
    kept.keep(revision, "runs", "id", RUN_COLUMNS, where=" OR ".join(f"{c} IS NOT NULL" for c in RUN_COLUMNS))
    kept.keep(
        revision,
        "documents",
        "id",
        DOCUMENT_COLUMNS,
        where=" OR ".join(f"{c} IS NOT NULL" for c in DOCUMENT_COLUMNS),
    )
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("tier_reason")
        batch.drop_column("tier")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("tier_reason")
        batch.drop_column("standard_from")
        batch.drop_column("extract_tier")
