"""reviewed_extractions joins documents on the run as well as the id, and latest_extractions
picks each company's newest extraction in one ordered pass.

`reviewed_extractions where run_id = ...` read every document (a hash join on the id alone):
371 pages at 10,000 documents, 3,474 at 100,000; joined on the run too, the run's documents
come through their run index. `latest_extractions` looked each extraction's company up again in
the whole view (a correlated subquery per row: cut off after 60 s at 10,000 documents); a window
numbering each company's extractions newest first reads them once. Same rows, same order of
preference (fiscal year, then creation, then id, newest first).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _latest(field: str, alias: str) -> str:
    """Left join of the newest correction of `field` for the extraction's document."""
    return f"""left join corrections {alias} on {alias}.id = (
            select c.id from corrections c
            where c.document_id = e.document_id and c.field = '{field}'
            order by c.reviewed_at desc, c.id desc limit 1)"""


def _reviewed(join_on: str) -> str:
    return f"""
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
    join documents d on {join_on}
    {_latest("company", "cc")}
    {_latest("fiscal_year", "cy")}
    {_latest("revenue_usd", "cr")}
"""


REVIEWED_EXTRACTIONS = _reviewed("d.id = e.document_id and d.run_id = e.run_id")
OLD_REVIEWED_EXTRACTIONS = _reviewed("d.id = e.document_id")

LATEST_EXTRACTIONS = """
    select company, fiscal_year, revenue_usd, revenue_quote, run_id,
           document_id, path, created_at,
           company_confidence, fiscal_year_confidence, revenue_confidence
    from (
        select e.*, row_number() over (
                   partition by e.company
                   order by e.fiscal_year desc, e.created_at desc, e.extraction_id desc) as newest
        from reviewed_extractions e
        where e.company is not null
    ) ranked
    where newest = 1
"""

OLD_LATEST_EXTRACTIONS = """
    select e.company, e.fiscal_year, e.revenue_usd, e.revenue_quote, e.run_id,
           e.document_id, e.path, e.created_at,
           e.company_confidence, e.fiscal_year_confidence, e.revenue_confidence
    from reviewed_extractions e
    where e.company is not null
      and e.extraction_id = (select e2.extraction_id from reviewed_extractions e2
                             where e2.company = e.company
                             order by e2.fiscal_year desc, e2.created_at desc, e2.extraction_id desc limit 1)
"""


def _replace(reviewed: str, latest: str) -> None:
    op.execute("drop view if exists latest_extractions")
    op.execute("drop view if exists reviewed_extractions")
    op.execute(f"create view reviewed_extractions as {reviewed}")
    op.execute(f"create view latest_extractions as {latest}")


def upgrade() -> None:
    _replace(REVIEWED_EXTRACTIONS, LATEST_EXTRACTIONS)


def downgrade() -> None:
    _replace(OLD_REVIEWED_EXTRACTIONS, OLD_LATEST_EXTRACTIONS)
