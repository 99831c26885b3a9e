"""Reads bounded by the run: document_costs joins llm_calls on the run as well as the document
(the run's calls through their run_id index, not every run's), run_costs reads each run's calls
by its id on Postgres (the newest runs' costs without every call's), and the missing indexes:
extractions.partial_id (a partial's release, `prune`) and runs.created_at (the newest runs)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# What each document cost (its extraction and compression calls): the run's calls only.
DOCUMENT_COSTS = """
        select d.id as document_id, d.run_id, d.path, d.status,
               count(c.id) as calls,
               coalesce(sum(c.prompt_tokens), 0) as prompt_tokens,
               coalesce(sum(c.completion_tokens), 0) as completion_tokens,
               sum(c.cost_usd) as cost_usd
        from documents d left join llm_calls c on c.run_id = d.run_id and c.document_id = d.id
        group by d.id, d.run_id, d.path, d.status
    """

# What each run cost, each run's calls read by its id: `order by created_at desc limit 10`
# reads ten runs' calls (a grouped join reads every call first). LATERAL is Postgres's; SQLite,
# the embedded database of one machine's runs, keeps the grouped join.
RUN_COSTS_POSTGRES = """
        select r.id as run_id, r.name, r.status, r.created_at,
               c.calls, c.prompt_tokens, c.completion_tokens, c.cost_usd, c.unpriced_calls,
               r.budget_usd
        from runs r cross join lateral (
            select count(*) as calls,
                   coalesce(sum(k.prompt_tokens), 0) as prompt_tokens,
                   coalesce(sum(k.completion_tokens), 0) as completion_tokens,
                   sum(k.cost_usd) as cost_usd,
                   count(*) - count(k.cost_usd) as unpriced_calls
            from llm_calls k where k.run_id = r.id) c
    """

# As 0005 made them: what the downgrade puts back.
OLD_RUN_COSTS = """
        select r.id as run_id, r.name, r.status, r.created_at,
               count(c.id) as calls,
               coalesce(sum(c.prompt_tokens), 0) as prompt_tokens,
               coalesce(sum(c.completion_tokens), 0) as completion_tokens,
               sum(c.cost_usd) as cost_usd,
               sum(case when c.id is not null and c.cost_usd is null then 1 else 0 end) as unpriced_calls,
               r.budget_usd
        from runs r left join llm_calls c on c.run_id = r.id
        group by r.id, r.name, r.status, r.created_at, r.budget_usd
    """
OLD_DOCUMENT_COSTS = """
        select d.id as document_id, d.run_id, d.path, d.status,
               count(c.id) as calls,
               coalesce(sum(c.prompt_tokens), 0) as prompt_tokens,
               coalesce(sum(c.completion_tokens), 0) as completion_tokens,
               sum(c.cost_usd) as cost_usd
        from documents d left join llm_calls c on c.document_id = d.id
        group by d.id, d.run_id, d.path, d.status
    """


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _replace(name: str, body: str) -> None:
    op.execute(f"drop view if exists {name}")
    op.execute(f"create view {name} as {body}")


def upgrade() -> None:
    op.create_index("ix_extractions_partial_id", "extractions", ["partial_id"])
    op.create_index("ix_runs_created_at", "runs", ["created_at"])
    _replace("document_costs", DOCUMENT_COSTS)
    if _postgres():
        _replace("run_costs", RUN_COSTS_POSTGRES)


def downgrade() -> None:
    if _postgres():
        _replace("run_costs", OLD_RUN_COSTS)
    _replace("document_costs", OLD_DOCUMENT_COSTS)
    op.drop_index("ix_runs_created_at", table_name="runs")
    op.drop_index("ix_extractions_partial_id", table_name="extractions")
