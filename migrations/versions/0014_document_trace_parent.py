"""documents.trace_parent: the W3C traceparent of the document's submit span, under which every
delivery's extract span opens (`pipeline.core.tracing`); NULL when traces are off

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        batch.add_column(sa.Column("trace_parent", sa.String(64), nullable=True))
    # After a downgrade (migrations/kept.py): a document's later deliveries open under its trace.
    kept.put_back(revision, "documents", "id", ["trace_parent"])


def downgrade() -> None:
    kept.keep(revision, "documents", "id", ["trace_parent"], where="trace_parent IS NOT NULL")
    with op.batch_alter_table("documents") as batch:
        batch.drop_column("trace_parent")
