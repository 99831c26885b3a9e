"""Per-field confidence (extractions.*_confidence, revenue_match, escalated; risk_factors.confidence
and match; chunks.token_p), the review loop's corrections table, and views that read corrections over extractions:
reviewed_extractions, reviewed_risk_factors, and latest_extractions on corrected values

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _latest(field: str, alias: str) -> str:
    """Left join of the newest correction of `field` for the extraction's document."""
    return f"""left join corrections {alias} on {alias}.id = (
            select c.id from corrections c
            where c.document_id = e.document_id and c.field = '{field}'
            order by c.reviewed_at desc, c.id desc limit 1)"""


# Every extraction with its reviewed values: a correction (the newest per field) overrides the
# model's value; a correction to "no value" gives NULL. *_reviewed says which fields a person set.
REVIEWED_EXTRACTIONS = f"""
    select e.id as extraction_id, e.document_id, e.run_id, d.path,
           case when cc.id is not null then cc.value else e.company end as company,
           case when cy.id is not null then cast(cy.value as integer) else e.fiscal_year end as fiscal_year,
           case when cr.id is not null then cast(cr.value as float) else e.revenue_usd end as revenue_usd,
           e.revenue_quote,
           e.company_confidence, e.fiscal_year_confidence, e.revenue_confidence, e.revenue_match,
           cc.id is not null as company_reviewed,
           cy.id is not null as fiscal_year_reviewed,
           cr.id is not null as revenue_reviewed,
           e.model, e.escalated, e.created_at
    from extractions e
    join documents d on d.id = e.document_id
    {_latest("company", "cc")}
    {_latest("fiscal_year", "cy")}
    {_latest("revenue_usd", "cr")}
"""

# Every risk factor with its reviewed title: a correction to "no value" marks it rejected.
REVIEWED_RISK_FACTORS = """
    select r.id as risk_factor_id, r.document_id, r.run_id, r.position,
           case when c.id is not null and c.value is not null then c.value else r.title end as title,
           c.id is not null and c.value is null as rejected,
           c.id is not null as reviewed,
           r.quote, r.grounded, r.confidence, r.match
    from risk_factors r
    left join corrections c on c.id = (
        select c2.id from corrections c2
        where c2.document_id = r.document_id and c2.field = 'risk_title' and c2.position = r.position
        order by c2.reviewed_at desc, c2.id desc limit 1)
"""

# The newest extraction of each company, whichever run it came from, on reviewed values.
LATEST_EXTRACTIONS = """
    select e.company, e.fiscal_year, e.revenue_usd, e.revenue_quote, e.run_id,
           e.document_id, e.path, e.created_at,
           e.company_confidence, e.fiscal_year_confidence, e.revenue_confidence
    from reviewed_extractions e
    where e.company is not null
      and e.extraction_id = (select e2.extraction_id from reviewed_extractions e2
                             where e2.company = e.company
                             order by e2.fiscal_year desc, e2.created_at desc, e2.extraction_id desc limit 1)
"""

OLD_LATEST_EXTRACTIONS = """
    select e.company, e.fiscal_year, e.revenue_usd, e.revenue_quote, e.run_id,
           e.document_id, d.path, e.created_at
    from extractions e
    join documents d on d.id = e.document_id
    where e.company is not null
      and e.id = (select e2.id from extractions e2 where e2.company = e.company
                  order by e2.fiscal_year desc, e2.created_at desc, e2.id desc limit 1)
"""


def upgrade() -> None:
    op.execute("drop view if exists latest_extractions")
    with op.batch_alter_table("extractions") as batch:
        batch.add_column(sa.Column("company_confidence", sa.Float(), nullable=True))
        batch.add_column(sa.Column("fiscal_year_confidence", sa.Float(), nullable=True))
        batch.add_column(sa.Column("revenue_confidence", sa.Float(), nullable=True))
        batch.add_column(sa.Column("revenue_match", sa.String(12), nullable=True))
        batch.add_column(sa.Column("escalated", sa.String(100), nullable=True))
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    with op.batch_alter_table("chunks") as batch:
        batch.add_column(sa.Column("token_p", json_type, nullable=True))
    with op.batch_alter_table("risk_factors") as batch:
        batch.add_column(sa.Column("confidence", sa.Float(), nullable=True))
        batch.add_column(sa.Column("match", sa.String(12), nullable=True))
    id_type = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "corrections",
        sa.Column("id", id_type, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column(
            "document_id", id_type, sa.ForeignKey("documents.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("field", sa.String(20), nullable=False),
        sa.Column("position", sa.Integer(), nullable=True),
        sa.Column("value", sa.Text(), nullable=True),
        sa.Column("original", sa.Text(), nullable=True),
        sa.Column("reviewer", sa.String(200), nullable=False),
        sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String(300), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_corrections_document_field", "corrections", ["document_id", "field"])
    op.create_index("ix_corrections_run_id", "corrections", ["run_id"])
    op.execute(f"create view reviewed_extractions as {REVIEWED_EXTRACTIONS}")
    op.execute(f"create view reviewed_risk_factors as {REVIEWED_RISK_FACTORS}")
    op.execute(f"create view latest_extractions as {LATEST_EXTRACTIONS}")
    # After a downgrade (migrations/kept.py): the reviewers' corrections, the fields' confidence.
    parents = {"run_id": "runs", "document_id": "documents"}
    kept.put_back_table(revision, "corrections", CORRECTION_COLUMNS, parents)
    for table, columns in KEPT.items():
        kept.put_back(revision, table, "id", columns)


KEPT = {
    "extractions": [
        "company_confidence",
        "fiscal_year_confidence",
        "revenue_confidence",
        "revenue_match",
        "escalated",
    ],
    "chunks": ["token_p"],
    "risk_factors": ["confidence", "match"],
}
CORRECTION_COLUMNS = [
    "id",
    "run_id",
    "document_id",
    "field",
    "position",
    "value",
    "original",
    "reviewer",
    "reviewed_at",
    "source",
    "created_at",
]


def downgrade() -> None:
    kept.keep_table(revision, "corrections")
    for table, columns in KEPT.items():
        kept.keep(revision, table, "id", columns, where=" OR ".join(f"{c} IS NOT NULL" for c in columns))
    op.execute("drop view if exists latest_extractions")
    op.execute("drop view if exists reviewed_risk_factors")
    op.execute("drop view if exists reviewed_extractions")
    op.execute(f"create view latest_extractions as {OLD_LATEST_EXTRACTIONS}")
    op.drop_table("corrections")
    with op.batch_alter_table("risk_factors") as batch:
        batch.drop_column("match")
        batch.drop_column("confidence")
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("token_p")
    with op.batch_alter_table("extractions") as batch:
        batch.drop_column("escalated")
        batch.drop_column("revenue_match")
        batch.drop_column("revenue_confidence")
        batch.drop_column("fiscal_year_confidence")
        batch.drop_column("company_confidence")
