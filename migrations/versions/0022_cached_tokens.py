"""llm_calls.cached_tokens: of a call's prompt tokens, those the provider served from its prompt
cache (`usage.prompt_tokens_details.cached_tokens`), priced at the cached-input price; 0 for
the calls recorded before

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN (SQLite has it natively): a batch table copy would break the views.
    op.add_column("llm_calls", sa.Column("cached_tokens", sa.Integer(), server_default="0", nullable=False))
    # After a downgrade (migrations/kept.py): the calls' cached tokens, which their cost counted.
    kept.put_back(revision, "llm_calls", "id", ["cached_tokens"])


def downgrade() -> None:
    kept.keep(revision, "llm_calls", "id", ["cached_tokens"], where="cached_tokens > 0")
    if op.get_bind().dialect.name == "sqlite":  # SQLite 3.35+, no table copy (it would break the views)
        op.execute("ALTER TABLE llm_calls DROP COLUMN cached_tokens")
    else:
        op.drop_column("llm_calls", "cached_tokens")
