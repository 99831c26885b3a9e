"""The EDGAR intake: what each document was read as (format, what was taken and left out) and
the filing's metadata as columns (form, company, CIK, period, fiscal year, accession, filing
date); the converted text's map back to the source file (contents.source_offsets)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from migrations import kept

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
COLUMNS = (
    ("source_format", sa.String(12)),
    ("form_type", sa.String(20)),
    ("company_name", sa.String(300)),
    ("cik", sa.String(10)),
    ("period_of_report", sa.Date()),
    ("fiscal_year", sa.Integer()),
    ("accession_number", sa.String(25)),
    ("filing_date", sa.Date()),
    ("intake", JSON),
)


def upgrade() -> None:
    with op.batch_alter_table("documents") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))
        batch.create_index("ix_documents_form_type", ["form_type"])
    with op.batch_alter_table("contents") as batch:
        batch.add_column(sa.Column("source_offsets", JSON, nullable=True))
    # After a downgrade (migrations/kept.py): the documents of a run already stored are not read again.
    kept.put_back(revision, "documents", "id", [name for name, _ in COLUMNS])
    kept.put_back(revision, "contents", "sha256", ["source_offsets"])


def downgrade() -> None:
    # Derived from the files at submit, but a run already stored is not read again: kept aside.
    kept.keep(revision, "documents", "id", [name for name, _ in COLUMNS])
    kept.keep(revision, "contents", "sha256", ["source_offsets"], where="source_offsets IS NOT NULL")
    with op.batch_alter_table("contents") as batch:
        batch.drop_column("source_offsets")
    with op.batch_alter_table("documents") as batch:
        batch.drop_index("ix_documents_form_type")
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
