"""runs.pruned_at and runs.pruned (what `pipeline prune` dropped, and the run's call totals
before), contents.text nullable (a pruned filing's text is NULL; its hash and size stay)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from migrations import kept

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("pruned_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column(
                "pruned",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )
    # Postgres: a catalog change only (no rewrite of the table, whatever its size).
    with op.batch_alter_table("contents") as batch:
        batch.alter_column("text", existing_type=sa.Text(), nullable=True)
    # After a downgrade: the runs pruned are marked again (`retry` refuses them), and the texts
    # it kept as '' are NULL again (a submit of the same filing stores the text again).
    kept.put_back(revision, "runs", "id", RUN_COLUMNS)
    kept.put_back(revision, "contents", "sha256", ["text"], where="text = ''")


RUN_COLUMNS = ["pruned_at", "pruned"]


def downgrade() -> None:
    # A pruned text cannot come back: its row keeps an empty text, as NOT NULL requires, and
    # which texts those are is kept aside (migrations/kept.py) with the runs' marks, for the
    # upgrade to put back.
    kept.keep(revision, "runs", "id", RUN_COLUMNS, where="pruned_at IS NOT NULL OR pruned IS NOT NULL")
    kept.keep(revision, "contents", "sha256", ["text"], where="text IS NULL")
    op.execute("UPDATE contents SET text = '' WHERE text IS NULL")
    with op.batch_alter_table("contents") as batch:
        batch.alter_column("text", existing_type=sa.Text(), nullable=False)
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("pruned")
        batch.drop_column("pruned_at")
