"""runs.estimate: what `pipeline plan` estimated for the run at submit (calls, tokens, cost and
time per mode), for status and the report to set against what the run used

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept
from sqlalchemy.dialects import postgresql

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column(
                "estimate",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )
    kept.put_back(revision, "runs", "id", ["estimate"])  # after a downgrade (migrations/kept.py)


def downgrade() -> None:
    kept.keep(revision, "runs", "id", ["estimate"], where="estimate IS NOT NULL")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("estimate")
