"""document_attempts (the rounds `pipeline retry` ended) and the dead_letters view

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from migrations import kept

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The class of a document's error, from the sentences the pipeline writes (pipeline.core.errors,
# the task layer's "gave up after N attempts: <error class>: ...", the LLM client's refusals).
# The first that matches wins; tests/test_dead_letters.py checks each against a real message.
REASON_CLASS = """
    case
      when d.status = 'cancelled' then 'cancelled'
      when d.status = 'skipped' then 'input'
      when d.error like 'the LLM endpoint % has been unavailable%' then 'outage'
      when d.error like 'gave up after % attempts; last:%' then 'gave up'
      when d.error like 'gave up after % attempts: MalformedAnswer%' then 'invalid output'
      when d.error like 'gave up after % attempts: %' then 'outage'
      when d.error like 'answer did not validate%' or d.error like 'answer was not JSON%' then 'invalid output'
      when d.error like 'the endpoint %' or d.error like 'the API key %' or d.error like 'the request exceeds %'
        then 'provider refused'
      when d.error like 'one call needs about %' then 'input'
      when d.error like 'budget:%' then 'budget'
      when d.error like 'internal error:%' then 'internal error'
      else 'other'
    end
"""

# Every document of every run that did not end extracted, with why, for analysts:
# `select * from dead_letters`. rounds: how many times it was tried (1 + the retries).
DEAD_LETTERS = f"""
    select d.run_id, r.name as run_name, r.status as run_status, d.id as document_id, d.path,
           d.status, {REASON_CLASS} as reason_class, d.error, d.attempts,
           1 + (select count(*) from document_attempts a where a.document_id = d.id) as rounds,
           d.finished_at, r.created_at as run_created_at
    from documents d join runs r on r.id = d.run_id
    where d.status in ('failed', 'cancelled', 'skipped')
"""


def upgrade() -> None:
    op.create_table(
        "document_attempts",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("document_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("retried_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["document_id"], ["documents.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.UniqueConstraint("document_id", "round", name="uq_document_attempts_round"),
    )
    op.create_index("ix_document_attempts_run_id", "document_attempts", ["run_id"])
    op.execute(f"create view dead_letters as {DEAD_LETTERS}")
    # After a downgrade (migrations/kept.py): the documents' earlier rounds.
    parents = {"document_id": "documents", "run_id": "runs"}
    kept.put_back_table(revision, "document_attempts", ATTEMPT_COLUMNS, parents)


ATTEMPT_COLUMNS = [
    "id",
    "document_id",
    "run_id",
    "round",
    "status",
    "error",
    "attempts",
    "started_at",
    "finished_at",
    "retried_at",
]


def downgrade() -> None:
    kept.keep_table(revision, "document_attempts")
    op.execute("drop view if exists dead_letters")
    op.drop_index("ix_document_attempts_run_id", table_name="document_attempts")
    op.drop_table("document_attempts")
