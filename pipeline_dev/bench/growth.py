"""Growth: each operator read path at 10,000 documents and again at 100,000, on Postgres.

A scratch database (created, then dropped) is filled with plausible nights straight in SQL
(`insert ... select` over generate_series: runs of 1,000 documents, each with its filing text,
4 chunks, an extract call per chunk, a compression per document, a synthesis per run, an
extraction, 3 risk factors, an XBRL fact, and the run's report). The ten newest runs are
measured; then 90 older nights are added (the same ten runs stay the newest) and the same
reads are measured again. Each path runs as the commands run it; every statement it sent is
then explained (EXPLAIN (ANALYZE, BUFFERS)): its time on the server (planning and execution,
the median of REPEATS) and its pages (shared buffers hit or read).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline_dev.bench.retention import scratch_database, vacuum

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline_dev.bench.regimes import BenchConfig, Result

DOCUMENTS_PER_RUN = 1000
MEASURED_RUNS = 10
"""The newest nights, measured at both sizes: 10,000 documents."""
GROWTH = 10
"""The database grows tenfold: 90 older nights are added under the same ten."""
REPEATS = 5
GOAL_RATIO = 1.3
MODEL = "sim-1"
COMPANIES = 1500
"""The filers the nights come back to (latest_extractions has one row per company)."""
DOCS = (
    Path(__file__).resolve().parents[2] / "README.md",
    Path(__file__).resolve().parents[2] / "docs/querying.md",
)
ACROSS_RUNS_TIMEOUT_MS = 60_000
"""The documented queries over every run (failures by reason, each company's newest figure)
read the whole history by design: measured too, each cut off after this long."""

NIGHTS = """
insert into runs (id, name, query, status, model, prompt_version, simulated, reuse_answers,
                  resumes, cost_usd, created_at, started_at, stored_at, finished_at, mode)
select md5(:tag || g), :tag || g, 'Summarize revenue and the top risk factors across these filings.',
       'completed', :model, 'extract-v3', true, true, 0, 0, t, t, t + interval '5 min',
       t + interval '40 min', 'sync'
from generate_series(cast(:first as int), cast(:last as int)) g, lateral (select now() - g * interval '1 day' as t) x
"""
FILLS = (
    """insert into contents (sha256, text, bytes, created_at)
    select md5(r.id || i) || md5(i || r.id), repeat('Revenue grew. Risk: competition. ', 60), 2000, r.created_at
    from runs r, generate_series(1, cast(:per_run as int)) i where r.name like :tag || '%'""",
    """insert into documents (run_id, path, sha256, bytes, status, error, chunk_count, attempts, created_at,
        started_at, finished_at, injection_flag, fence, reclaims, form_type, company_name, fiscal_year, tier)
    select r.id, '/filings/' || r.name || '/' || i || '-10k.htm', md5(r.id || i) || md5(i || r.id), 2000,
        case when i % 50 = 0 then 'failed' when i % 97 = 0 then 'skipped' else 'extracted' end,
        case when i % 50 = 0 then 'gave up after 5 attempts: the endpoint answered 503' end,
        4, 1, r.created_at, r.started_at, r.finished_at, i % 89 = 0, 1, 0, '10-K',
        'Company ' || (i * 7 + r.created_at::date - date '2000-01-01') % cast(:companies as int),
        extract(year from r.created_at)::int, 'sync'
    from runs r, generate_series(1, cast(:per_run as int)) i where r.name like :tag || '%'""",
    """insert into chunks (document_id, run_id, idx, char_start, char_end, token_estimate, result,
        prompt_version, model, completed_at, section, batch_tries)
    select d.id, d.run_id, k, k * 500, k * 500 + 500, 1400 + k * 13, '{"revenue_usd": 1.0e9, "risks": []}',
        'extract-v3', :model, d.finished_at, 'Item 7', 0
    from documents d join runs r on r.id = d.run_id, generate_series(0, 3) k where r.name like :tag || '%'""",
    """insert into llm_calls (run_id, document_id, chunk_idx, stage, model, status, prompt_tokens,
        completion_tokens, latency_ms, key_slot, limiter_wait_ms, cost_usd, mode, created_at)
    select d.run_id, d.id, k, case when k < 4 then 'extract' else 'compress' end, :model,
        case when d.status = 'failed' then 'unavailable' else 'ok' end,
        1600 + k * 13, 300, 1400, 0, 0, 0.0004, 'sync', d.finished_at
    from documents d join runs r on r.id = d.run_id, generate_series(0, 4) k
    where r.name like :tag || '%' and d.status <> 'skipped'""",
    """insert into llm_calls (run_id, stage, model, status, prompt_tokens, completion_tokens, latency_ms,
        key_slot, limiter_wait_ms, cost_usd, mode, created_at)
    select r.id, 'synthesize', :model, 'ok', 60000, 900, 9000, 0, 0, 0.01, 'sync', r.finished_at
    from runs r where r.name like :tag || '%'""",
    """insert into extractions (document_id, run_id, company, fiscal_year, revenue_usd, revenue_quote,
        revenue_grounded, quotes_total, quotes_grounded, data, model, prompt_version, created_at,
        company_confidence, fiscal_year_confidence, revenue_confidence, revenue_match, summary)
    select d.id, d.run_id, d.company_name, d.fiscal_year, 1.0e9 + d.id, 'Total revenue was $1.0 billion',
        true, 4, 4, '{"company": "x", "risk_factors": []}', :model, 'extract-v3', d.finished_at,
        0.95, 0.9, case when d.id % 40 = 0 then 0.4 else 0.9 end, 'exact', 'Revenue grew.'
    from documents d join runs r on r.id = d.run_id where r.name like :tag || '%' and d.status = 'extracted'""",
    """insert into risk_factors (document_id, run_id, position, title, quote, grounded, confidence, match)
    select e.document_id, e.run_id, p, 'Competition ' || p, 'We face competition.', p <> 3, 0.8, 'exact'
    from extractions e join runs r on r.id = e.run_id, generate_series(1, 3) p where r.name like :tag || '%'""",
    """insert into xbrl_facts (document_id, run_id, field, value, concept, why)
    select d.id, d.run_id, 'revenue_usd', case when d.id % 3 = 0 then null else 1.0e9 + d.id end,
        'us-gaap:Revenues', case when d.id % 3 = 0 then 'no inline XBRL in the filing' end
    from documents d join runs r on r.id = d.run_id where r.name like :tag || '%'""",
    """insert into document_attempts (document_id, run_id, round, status, error, attempts, retried_at)
    select d.id, d.run_id, 1, 'failed', d.error, 5, d.finished_at
    from documents d join runs r on r.id = d.run_id where r.name like :tag || '%' and d.status = 'failed'""",
    """insert into reports (run_id, markdown, json, created_at)
    select r.id, repeat('| a filing | revenue | risks |' || chr(10), 2000), '{"documents": 1000}', r.finished_at
    from runs r where r.name like :tag || '%'""",
    """update runs r set cost_usd = (select sum(cost_usd) from llm_calls c where c.run_id = r.id)
    where r.name like :tag || '%'""",
)


def seed(engine: Engine, tag: str, first: int, last: int, per_run: int) -> None:
    """Nights `first`..`last` days ago (named `tag` and their number), `per_run` documents each."""
    from sqlalchemy import text

    values = {"tag": tag, "first": first, "last": last, "per_run": per_run}
    values |= {"model": MODEL, "companies": COMPANIES}
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL statement_timeout = 0"))
        for statement in (NIGHTS, *FILLS):
            names = set(re.findall(r"(?<!:):(\w+)", statement))
            conn.execute(text(statement), {k: v for k, v in values.items() if k in names})


def documented_queries() -> list[str]:
    """Every statement of the README's and docs/querying.md's ```sql blocks."""
    found = []
    for page in DOCS:
        for block in re.findall(r"```sql\n(.*?)```", page.read_text(), flags=re.S):
            found += [" ".join(s.split()) for s in block.split(";") if s.strip()]
    return found


def read_paths(engine: Engine, run_id: str) -> dict[str, Callable[[], object]]:
    """Each operator read as its command makes it."""
    from pipeline.core.settings import get_settings
    from pipeline.runs.estimate import history
    from pipeline.runs.status import list_runs, resolve_run_id, run_status
    from pipeline.storage import reports
    from pipeline.storage.db import session_scope

    settings = get_settings().model_copy(update={"llm_model": MODEL, "plan_history_runs": 5})

    def report() -> object:
        newest = resolve_run_id(engine, None)
        with session_scope(engine) as session:
            return reports.get_report(session, newest)

    return {
        "status": lambda: run_status(engine, run_id),
        # As many runs as the smaller database holds: the same runs listed at both sizes.
        "runs": lambda: list_runs(engine, MEASURED_RUNS),
        "runs --json": lambda: list_runs(engine, MEASURED_RUNS, detail=True),
        "report": report,
        "plan history": lambda: history(engine, settings),
    }


def captured(engine: Engine, read: Callable[[], object]) -> list[tuple[str, Any]]:
    """The SELECT statements `read` sends, with their parameters."""
    from sqlalchemy import event

    sent: list[tuple[str, Any]] = []

    def keep(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip().lower().startswith(("select", "with")):
            sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", keep)
    try:
        read()
    finally:
        event.remove(engine, "before_cursor_execute", keep)
    return sent


def explained(engine: Engine, statements: list[tuple[str, Any]], timeout_ms: int = 0) -> tuple[float, int]:
    """Server milliseconds (planning and execution) and pages (shared buffers hit or read)
    summed over the statements, each run under EXPLAIN (ANALYZE, BUFFERS)."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute(f"SET statement_timeout = {timeout_ms}")
        ms, pages = 0.0, 0
        for statement, parameters in statements:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", parameters or None)
            row = cursor.fetchone()
            assert row is not None
            plan = row[0][0]
            ms += plan["Planning Time"] + plan["Execution Time"]
            top = plan["Plan"]
            pages += top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
        raw.rollback()
        return ms, pages
    finally:
        raw.close()


def measure(engine: Engine, run_id: str) -> dict[str, dict[str, Any]]:
    """Each path's median server time, pages and statements; the documented SQL one by one."""
    paths = {name: captured(engine, read) for name, read in read_paths(engine, run_id).items()}
    for query in documented_queries():
        across = ":'run'" not in query
        paths[("across runs: " if across else "sql: ") + query[:70]] = [
            (query.replace(":'run'", f"'{run_id}'"), None)
        ]
    found = {}
    for name, statements in paths.items():
        timeout = ACROSS_RUNS_TIMEOUT_MS if name.startswith("across") else 0
        try:
            runs = [explained(engine, statements, timeout) for _ in range(REPEATS)]
            ms, pages = statistics.median(r[0] for r in runs), runs[-1][1]
        except Exception as exc:  # an across-runs query cut off: said, not measured
            ms, pages = None, None
            name += f" (stopped: {type(exc).__name__})"
        found[name] = {
            "ms": None if ms is None else round(ms, 2),
            "pages": pages,
            "statements": len(statements),
        }
    return found


def documents_in(engine: Engine) -> int:
    from sqlalchemy import text

    with engine.connect() as conn:
        return int(conn.execute(text("select count(*) from documents")).scalar_one())


def growth(cfg: BenchConfig) -> Result:
    from pipeline.storage.db import get_engine

    if not cfg.database_url.startswith("postgresql"):
        return {
            "skipped": "growth measures Postgres: set PIPELINE_DATABASE_URL to a server it may create a database on"
        }
    per_run = cfg.count(DOCUMENTS_PER_RUN)
    with scratch_database(cfg.database_url) as url:
        engine = get_engine(url)
        seed(engine, "night ", 0, MEASURED_RUNS - 1, per_run)
        vacuum(url, full=False)
        run_id = _newest(engine)
        small, small_docs = measure(engine, run_id), documents_in(engine)
        seed(engine, "older night ", MEASURED_RUNS, MEASURED_RUNS * GROWTH - 1, per_run)
        vacuum(url, full=False)
        large, large_docs = measure(engine, run_id), documents_in(engine)
    paths = {}
    for name, before in small.items():
        after = large.get(name, {"ms": None, "pages": None})
        paths[name] = {
            "ms": [before["ms"], after["ms"]],
            "pages": [before["pages"], after["pages"]],
            "statements": before["statements"],
            "ms_ratio": _ratio(before["ms"], after["ms"]),
            "pages_ratio": _ratio(before["pages"], after["pages"]),
        }
    bounded = {n: p for n, p in paths.items() if not n.startswith("across")}
    worst = max((p["ms_ratio"] or 0.0 for p in bounded.values()), default=0.0)
    return {
        "documents": small_docs,
        "documents_grown": large_docs,
        "run_documents": per_run,
        "paths": paths,
        "worst_ms_ratio": worst,
        "worst_pages_ratio": max((p["pages_ratio"] or 0.0 for p in bounded.values()), default=0.0),
        "goal": f"each run's read path within {GOAL_RATIO}x from {small_docs:,} to {large_docs:,} documents",
        "met": all((p["ms_ratio"] or 99) <= GOAL_RATIO for p in bounded.values()),
    }


def _newest(engine: Engine) -> str:
    from pipeline.runs.status import resolve_run_id

    return resolve_run_id(engine, None)


def _ratio(before: float | None, after: float | None) -> float | None:
    if before is None or after is None:
        return None
    return round(after / before, 2) if before else (1.0 if not after else None)
