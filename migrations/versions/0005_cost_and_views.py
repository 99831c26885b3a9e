"""cost per call and run, run budget, analyst views

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS = {
    # What each run cost: calls, tokens and USD (NULL cost: a model without a price).
    "run_costs": """
        select r.id as run_id, r.name, r.status, r.created_at,
               count(c.id) as calls,
               coalesce(sum(c.prompt_tokens), 0) as prompt_tokens,
               coalesce(sum(c.completion_tokens), 0) as completion_tokens,
               sum(c.cost_usd) as cost_usd,
               sum(case when c.id is not null and c.cost_usd is null then 1 else 0 end) as unpriced_calls,
               r.budget_usd
        from runs r left join llm_calls c on c.run_id = r.id
        group by r.id, r.name, r.status, r.created_at, r.budget_usd
    """,
    # What each document cost (its extraction and compression calls).
    "document_costs": """
        select d.id as document_id, d.run_id, d.path, d.status,
               count(c.id) as calls,
               coalesce(sum(c.prompt_tokens), 0) as prompt_tokens,
               coalesce(sum(c.completion_tokens), 0) as completion_tokens,
               sum(c.cost_usd) as cost_usd
        from documents d left join llm_calls c on c.document_id = d.id
        group by d.id, d.run_id, d.path, d.status
    """,
    # The newest extraction of each company, whichever run it came from.
    "latest_extractions": """
        select e.company, e.fiscal_year, e.revenue_usd, e.revenue_quote, e.run_id,
               e.document_id, d.path, e.created_at
        from extractions e
        join documents d on d.id = e.document_id
        where e.company is not null
          and e.id = (select e2.id from extractions e2 where e2.company = e.company
                      order by e2.fiscal_year desc, e2.created_at desc, e2.id desc limit 1)
    """,
}


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch_op:
        batch_op.add_column(sa.Column("budget_usd", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("cost_usd", sa.Float(), server_default="0", nullable=False))
    with op.batch_alter_table("llm_calls") as batch_op:
        batch_op.add_column(sa.Column("cost_usd", sa.Float(), nullable=True))
    for name, body in VIEWS.items():
        op.execute(f"create view {name} as {body}")
    # After a downgrade (migrations/kept.py): the runs' budgets and spending, the calls' cost.
    kept.put_back(revision, "runs", "id", ["budget_usd", "cost_usd"])
    kept.put_back(revision, "llm_calls", "id", ["cost_usd"])


def downgrade() -> None:
    kept.keep(
        revision, "runs", "id", ["budget_usd", "cost_usd"], where="budget_usd IS NOT NULL OR cost_usd <> 0"
    )
    kept.keep(revision, "llm_calls", "id", ["cost_usd"], where="cost_usd IS NOT NULL")
    for name in VIEWS:
        op.execute(f"drop view if exists {name}")
    with op.batch_alter_table("llm_calls") as batch_op:
        batch_op.drop_column("cost_usd")
    with op.batch_alter_table("runs") as batch_op:
        batch_op.drop_column("cost_usd")
        batch_op.drop_column("budget_usd")
