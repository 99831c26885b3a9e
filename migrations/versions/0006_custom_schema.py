"""a run's custom extraction schema

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("schema", sa.String(length=200), nullable=True))
    kept.put_back(revision, "runs", "id", ["schema"])  # after a downgrade (migrations/kept.py)


def downgrade() -> None:
    kept.keep(revision, "runs", "id", ["schema"], where="schema IS NOT NULL")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("schema")
