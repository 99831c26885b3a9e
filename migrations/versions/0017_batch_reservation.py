"""llm_batches.estimated_cost_usd: what a batch may cost at most (its prompts and every line's
max_tokens at batch prices), held against the run's budget from its submission until its
lines are ingested, when their actual cost is recorded

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("llm_batches") as batch:
        batch.add_column(sa.Column("estimated_cost_usd", sa.Float(), nullable=True))
    # After a downgrade (migrations/kept.py): what a batch holds against its run's budget.
    kept.put_back(revision, "llm_batches", "id", ["estimated_cost_usd"])


def downgrade() -> None:
    kept.keep(revision, "llm_batches", "id", ["estimated_cost_usd"], where="estimated_cost_usd IS NOT NULL")
    with op.batch_alter_table("llm_batches") as batch:
        batch.drop_column("estimated_cost_usd")
