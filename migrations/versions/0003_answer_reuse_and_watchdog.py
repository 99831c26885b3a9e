"""answer reuse across runs, watchdog bookkeeping

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("reuse_answers", sa.Boolean(), server_default=sa.true(), nullable=False))
        batch_op.add_column(sa.Column("resumes", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("resumed_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("chunks") as batch_op:
        batch_op.add_column(sa.Column("reused_from", ID, nullable=True))
    # After a downgrade (migrations/kept.py): a run's `--fresh`, the watchdog's count, the
    # chunks' reused answers.
    kept.put_back(revision, "runs", "id", RUN_COLUMNS)
    kept.put_back(revision, "chunks", "id", ["reused_from"])


RUN_COLUMNS = ["reuse_answers", "resumes", "resumed_at"]


def downgrade() -> None:
    kept.keep(
        revision,
        "runs",
        "id",
        RUN_COLUMNS,
        where="NOT reuse_answers OR resumes <> 0 OR resumed_at IS NOT NULL",
    )
    kept.keep(revision, "chunks", "id", ["reused_from"], where="reused_from IS NOT NULL")
    with op.batch_alter_table("chunks") as batch_op:
        batch_op.drop_column("reused_from")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("resumed_at")
        batch_op.drop_column("resumes")
        batch_op.drop_column("reuse_answers")
