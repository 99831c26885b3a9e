"""A run's documents in path order (migration 0025), without and with `ix_documents_run_path`.

    PIPELINE_DATABASE_URL=postgresql+psycopg://... python -m pipeline_dev.bench.documents_order 100

A scratch Postgres database (created on that URL's server, dropped afterwards) is seeded as the
growth regime seeds it: one run of 20,000 documents and N older nights of 1,000 (100: 120,000
documents). The documents CSV's query is then read both ways: before, as 0024's code sent it
(extractions joined on the document alone) with the index dropped; after, joined on the run as
well, with the index. For each: the plan Postgres gives the CSV's server-side cursor (EXPLAIN of
a DECLARE: a cursor is planned for its first rows), EXPLAIN (ANALYZE, BUFFERS) of the SELECT,
and the CSV's own read timed through a server-side cursor, 500 rows a fetch (the median of
REPEATS: milliseconds to the first page and to the last row).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import TYPE_CHECKING, Any

from pipeline_dev.bench.growth import seed
from pipeline_dev.bench.retention import scratch_database, vacuum

if TYPE_CHECKING:
    from sqlalchemy import Engine, Select

REPEATS = 7
FETCH_ROWS = 500
RUN_DOCUMENTS = 20_000
INDEX = "create index ix_documents_run_path on documents (run_id, path, id)"


def _sql(query: Select[Any]) -> str:
    from sqlalchemy.dialects import postgresql

    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    return str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


def csv_queries(run_id: str) -> dict[str, str]:
    """The CSV's query as 0024's code sent it, and as it is sent now."""
    from sqlalchemy import select

    from pipeline.storage import extractions
    from pipeline.storage.models import Document, Extraction

    now = extractions._report_query(run_id).order_by(Document.path, Document.id)
    before = (
        select(*now.selected_columns)
        .outerjoin(Extraction, Extraction.document_id == Document.id)
        .where(Document.run_id == run_id)
        .order_by(Document.path, Document.id)
    )
    return {"before": _sql(before), "after": _sql(now)}


def explain(engine: Engine, statement: str) -> str:
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        lines = []
        for prefix in (
            "EXPLAIN (COSTS OFF) DECLARE csv NO SCROLL CURSOR FOR ",
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ",
        ):
            cursor.execute(prefix + statement)
            lines += [prefix.strip(), *(f"    {row[0]}" for row in cursor.fetchall())]
        raw.rollback()
        return "\n".join(lines)
    finally:
        raw.close()


def fetched(engine: Engine, statement: str) -> tuple[float, float, int]:
    """Through a server-side cursor: ms to the first page, ms to the last row, rows."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor(name="csv")  # psycopg's server-side cursor
        started = time.perf_counter()
        cursor.execute(statement)
        first, rows = 0.0, 0
        while page := cursor.fetchmany(FETCH_ROWS):
            first = first or (time.perf_counter() - started) * 1000
            rows += len(page)
        total = (time.perf_counter() - started) * 1000
        raw.rollback()
        return first, total, rows
    finally:
        raw.close()


def measure(url: str, nights: int) -> None:
    from sqlalchemy import text

    from pipeline.storage.db import get_engine

    with scratch_database(url) as scratch:
        engine = get_engine(scratch)
        seed(engine, "run ", 0, 0, RUN_DOCUMENTS)
        seed(engine, "night ", 1, nights, 1000)
        with engine.connect() as conn:
            run_id = str(conn.execute(text("select id from runs where name = 'run 0'")).scalar_one())
            documents = conn.execute(text("select count(*) from documents")).scalar_one()
        print(f"{documents:,} documents; the run's {RUN_DOCUMENTS:,} read by path")
        queries = csv_queries(run_id)
        for stage in ("before", "after"):
            with engine.begin() as conn:
                conn.execute(text("drop index if exists ix_documents_run_path"))
                if stage == "after":
                    conn.execute(text(INDEX))
            vacuum(scratch, full=False)
            fetched(engine, queries[stage])  # warm the cache
            runs = [fetched(engine, queries[stage]) for _ in range(REPEATS)]
            print(
                f"\n== {stage}: {'joined on the run, with' if stage == 'after' else '0024, without'} the index"
            )
            print(
                f"cursor: first {FETCH_ROWS} rows in {statistics.median(r[0] for r in runs):.1f} ms, "
                f"all {runs[0][2]:,} in {statistics.median(r[1] for r in runs):.1f} ms (median of {REPEATS})"
            )
            print(explain(engine, queries[stage]))


def main(argv: list[str]) -> None:
    url = os.environ.get("PIPELINE_DATABASE_URL", "")
    if not url.startswith("postgresql"):
        raise SystemExit("PIPELINE_DATABASE_URL: a postgresql:// URL (its server gets a scratch database)")
    measure(url, int(argv[0]) if argv else 100)


if __name__ == "__main__":
    main(sys.argv[1:])
