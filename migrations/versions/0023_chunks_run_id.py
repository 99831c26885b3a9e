"""chunks.run_id: a run's chunks found by their run, through an index of their own.

`pipeline status` and `pipeline runs` count a run's chunks and those answered. Found through
`documents`, Postgres hashed every chunk of every run (the run's documents are scattered over
the table by their random run id): 853 pages at 10,000 documents, 10,438 at 100,000. By the run's
own index the count reads the run's chunks alone. Filled from each chunk's document; the
downgrade drops it (it is derived, nothing is lost).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN (SQLite has it natively): a batch table copy would break the views.
    # Nullable as SQLite adds it; every chunk is stored with its run (storage/intake.py).
    op.add_column("chunks", sa.Column("run_id", sa.String(32), nullable=True))
    op.execute(
        "update chunks set run_id = (select d.run_id from documents d where d.id = chunks.document_id)"
    )
    # The answered count reads completed_at from the index alone.
    op.create_index("ix_chunks_run_id", "chunks", ["run_id", "completed_at"])


def downgrade() -> None:
    op.drop_index("ix_chunks_run_id", table_name="chunks")
    if op.get_bind().dialect.name == "sqlite":  # SQLite 3.35+, no table copy (it would break the views)
        op.execute("ALTER TABLE chunks DROP COLUMN run_id")
    else:
        op.drop_column("chunks", "run_id")
