"""documents.note: what intake remarked on a usable file (its encoding), kept whatever the outcome

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))
    # Until now the note was kept in `error` while the document waited (and erased on success).
    op.execute(
        "UPDATE documents SET note = error, error = NULL "
        "WHERE status IN ('pending', 'running') AND error LIKE 'not UTF-8%'"
    )
    kept.put_back(revision, "documents", "id", ["note"])  # after a downgrade (migrations/kept.py)


def downgrade() -> None:
    kept.keep(revision, "documents", "id", ["note"], where="note IS NOT NULL")
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("note")
