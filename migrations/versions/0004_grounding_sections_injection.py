"""grounded quotes, injection flags, chunk sections

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch_op:
        batch_op.add_column(sa.Column("injection_flag", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.add_column(sa.Column("injection_excerpt", sa.Text(), nullable=True))
    with op.batch_alter_table("chunks") as batch_op:
        batch_op.add_column(sa.Column("section", sa.String(length=40), nullable=True))
    with op.batch_alter_table("extractions") as batch_op:
        batch_op.add_column(sa.Column("revenue_grounded", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("revenue_quote_start", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("revenue_quote_end", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("quotes_total", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("quotes_grounded", sa.Integer(), server_default="0", nullable=False))
    with op.batch_alter_table("risk_factors") as batch_op:
        batch_op.add_column(sa.Column("grounded", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.add_column(sa.Column("quote_start", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("quote_end", sa.Integer(), nullable=True))
    for table, columns in KEPT.items():  # after a downgrade (migrations/kept.py)
        kept.put_back(revision, table, "id", columns)


KEPT = {
    "documents": ["injection_flag", "injection_excerpt"],
    "chunks": ["section"],
    "extractions": [
        "revenue_grounded",
        "revenue_quote_start",
        "revenue_quote_end",
        "quotes_total",
        "quotes_grounded",
    ],
    "risk_factors": ["grounded", "quote_start", "quote_end"],
}


def downgrade() -> None:
    for table, columns in KEPT.items():
        kept.keep(revision, table, "id", columns)
    with op.batch_alter_table("risk_factors") as batch_op:
        batch_op.drop_column("quote_end")
        batch_op.drop_column("quote_start")
        batch_op.drop_column("grounded")
    with op.batch_alter_table("extractions") as batch_op:
        for column in ("quotes_grounded", "quotes_total", "revenue_quote_end", "revenue_quote_start"):
            batch_op.drop_column(column)
        batch_op.drop_column("revenue_grounded")
    with op.batch_alter_table("chunks") as batch_op:
        batch_op.drop_column("section")
    with op.batch_alter_table("documents") as batch_op:
        batch_op.drop_column("injection_excerpt")
        batch_op.drop_column("injection_flag")
