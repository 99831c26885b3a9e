"""documents(run_id, path, id): a run's documents read in the order they are listed.

The documents CSV (`pipeline report RUN --format csv`, and `<run>-documents.csv` of a run past
the report's listing), the report's listing of documents that need a look, a custom schema's
table and the grounding rows read a run's documents by their stored path (`documents.path`, as
submitted; the HTML page shortens it only when it shows it), then id. Through the run's status
index Postgres fetched every document of the run and sorted them before the first row came
out; through this index the CSV's cursor reads them in order, with no sort (EXPLAIN before and
after, 120,000 documents: docs/benchmarks.md, 2026-12-06).

A btree entry holds at most 2,704 bytes: a path longer than that once compressed (random
characters past ~2,700 bytes; Linux paths are at most 4,096) is refused with the database's
reason, as any row the database refuses.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_documents_run_path", "documents", ["run_id", "path", "id"])


def downgrade() -> None:
    op.drop_index("ix_documents_run_path", table_name="documents")
