"""The filing's own inline-XBRL facts beside the model's answer (xbrl_facts: the total-revenue fact
with its concept and context, or why none fits) and the revenue_checks view: per document, the
model's revenue, the filing's, their relative difference and the verdict

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The tolerance is pipeline.extraction.signals.REVENUE_TOLERANCE (0.5 %): the model's figure agrees
# with the filing's when within it. Joined on the run as well as the document: a run's rows only.
REVENUE_CHECKS = """
    select d.run_id, d.id as document_id, d.path,
           e.revenue_usd as model_revenue_usd, x.value as xbrl_revenue_usd,
           x.concept as xbrl_concept, x.context as xbrl_context, x.period_start, x.period_end,
           case when e.revenue_usd is null or x.value is null or x.value = 0 then null
                else abs(e.revenue_usd - x.value) / abs(x.value) end as relative_difference,
           case when x.value is null then 'no fact'
                when e.id is null then 'not extracted'
                when e.revenue_usd is null then 'no answer'
                when abs(e.revenue_usd - x.value) <= 0.005 * abs(x.value) then 'agrees'
                else 'differs' end as verdict,
           x.why, e.revenue_confidence
    from documents d
    join xbrl_facts x on x.document_id = d.id and x.run_id = d.run_id and x.field = 'revenue_usd'
    left join extractions e on e.document_id = d.id and e.run_id = d.run_id
"""


FACT_COLUMNS = [
    "id",
    "document_id",
    "run_id",
    "field",
    "value",
    "concept",
    "context",
    "period_start",
    "period_end",
    "why",
]


def upgrade() -> None:
    id_type = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "xbrl_facts",
        sa.Column("id", id_type, primary_key=True, autoincrement=True),
        sa.Column("document_id", id_type, sa.ForeignKey("documents.id", ondelete="CASCADE"), nullable=False),
        sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("field", sa.String(20), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("concept", sa.String(200), nullable=True),
        sa.Column("context", sa.String(200), nullable=True),
        sa.Column("period_start", sa.Date(), nullable=True),
        sa.Column("period_end", sa.Date(), nullable=True),
        sa.Column("why", sa.Text(), nullable=True),
        sa.UniqueConstraint("document_id", "field", name="uq_xbrl_facts_document_field"),
    )
    op.create_index("ix_xbrl_facts_run_id", "xbrl_facts", ["run_id"])
    # After a downgrade (migrations/kept.py): the facts of runs already stored are not read again.
    kept.put_back_table(revision, "xbrl_facts", FACT_COLUMNS, {"document_id": "documents", "run_id": "runs"})
    op.execute(f"create view revenue_checks as {REVENUE_CHECKS}")


def downgrade() -> None:
    # Derived from the filings at submit, but a run already stored is not read again: kept aside.
    kept.keep_table(revision, "xbrl_facts")
    op.execute("drop view revenue_checks")
    op.drop_index("ix_xbrl_facts_run_id", table_name="xbrl_facts")
    op.drop_table("xbrl_facts")
