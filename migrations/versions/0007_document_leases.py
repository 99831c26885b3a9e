"""leases on documents in flight: owner, scope, expiry, fencing token, reclaims

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch_op:
        batch_op.add_column(sa.Column("lease_owner", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("lease_scope", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("fence", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("reclaims", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("reclaimed_from", sa.String(length=200), nullable=True))
        batch_op.create_index("ix_documents_status_lease", ["status", "lease_expires_at"], unique=False)
    # After a downgrade (migrations/kept.py): a running document's lease, its fence (a write of
    # an older lease stays refused) and its reclaims.
    kept.put_back(revision, "documents", "id", COLUMNS)


COLUMNS = ["lease_owner", "lease_scope", "lease_expires_at", "fence", "reclaims", "reclaimed_from"]


def downgrade() -> None:
    kept.keep(
        revision,
        "documents",
        "id",
        COLUMNS,
        where="lease_owner IS NOT NULL OR lease_scope IS NOT NULL OR lease_expires_at IS NOT NULL"
        " OR fence <> 0 OR reclaims <> 0 OR reclaimed_from IS NOT NULL",
    )
    with op.batch_alter_table("documents") as batch_op:
        batch_op.drop_index("ix_documents_status_lease")
        batch_op.drop_column("reclaimed_from")
        batch_op.drop_column("reclaims")
        batch_op.drop_column("fence")
        batch_op.drop_column("lease_expires_at")
        batch_op.drop_column("lease_scope")
        batch_op.drop_column("lease_owner")
