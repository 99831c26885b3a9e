"""runs.stored_at: when the producer had stored every document of the run

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN (SQLite has it natively): a batch table copy would break the views.
    op.add_column("runs", sa.Column("stored_at", sa.DateTime(timezone=True), nullable=True))
    # After a downgrade: without it `retry` refuses a run as still being stored, and finalize waits.
    kept.put_back(revision, "runs", "id", ["stored_at"])


def downgrade() -> None:
    kept.keep(revision, "runs", "id", ["stored_at"], where="stored_at IS NOT NULL")
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE runs DROP COLUMN stored_at")  # SQLite 3.35+, no table copy
    else:
        op.drop_column("runs", "stored_at")
