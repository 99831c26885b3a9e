"""Every ```sql block of the README and of docs/querying.md runs as written: in the real psql,
connected by the README's own psql line with `-v run=…`, against a Postgres run of `pipeline run`;
and in the real sqlite3 (Python's sqlite3 where the CLI is missing) on the SQLite file of another,
with `:'run'` written as the quoted id, as the README says to. Both runs are on the simulator with
nothing configured but the database, so the default model's shipped list price gives every call
its cost."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from pipeline.core.prices import list_prices
from pipeline.core.settings import default
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import LLMCall

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUERYING = ROOT / "docs" / "querying.md"
PAGES = (README, QUERYING)
"""The pages whose SQL is run; the README also holds the psql and sqlite3 lines."""
EXAMPLES = ROOT / "examples" / "filings"
PSQL = shutil.which("psql")
SQLITE3 = shutil.which("sqlite3")

FILINGS = 4
"""Example filings per run: enough for every query to find rows."""
MAY_BE_EMPTY = (
    "not r.grounded",
    "e.revenue_grounded = false",
    "from document_attempts",
    "e.revenue_confidence < 0.5",
    "verdict = 'differs'",
    "value is null group by why",
)
"""The simulator quotes its filings exactly, so the ungrounded-fact and doubtful-figure queries
find nothing; the runs here were never retried, so no round is kept."""


@dataclass(frozen=True)
class Run:
    run_id: str
    cwd: Path
    """Where `pipeline run` ran: its data directory is `.pipeline` here."""
    database_url: str | None


def blocks(kind: str, pages: tuple[Path, ...] = PAGES) -> list[str]:
    return [b for page in pages for b in re.findall(rf"```{kind}\n(.*?)```", page.read_text(), flags=re.S)]


def statements(block: str) -> list[str]:
    """A block's statements (none of the pages' holds a ';' inside a literal)."""
    return [s.strip() + ";" for s in block.split(";") if s.strip()]


def readme_line(starting: str) -> str:
    """The README's shell line that starts with `starting`."""
    lines = [ln for block in blocks("sh", (README,)) for ln in block.splitlines() if ln.startswith(starting)]
    assert len(lines) == 1, f"the README shows no single `{starting}…` line: {lines}"
    return lines[0]


def start_pipeline_run(cwd: Path, database_url: str | None) -> subprocess.Popen[str]:
    """`pipeline run` on FILINGS examples and one empty file (a skipped document for the failures
    query), in a fresh shell's environment: no setting but the database."""
    filings = cwd / "filings"
    filings.mkdir()
    for example in sorted(EXAMPLES.glob("*.txt"))[:FILINGS]:
        shutil.copy(example, filings / example.name)
    (filings / "empty.txt").write_text("  \n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINE_", "OPENAI_"))}
    if database_url:
        env["PIPELINE_DATABASE_URL"] = database_url
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", "filings", "--workers", "1"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(child: subprocess.Popen[str], cwd: Path, database_url: str | None) -> Run:
    out, err = child.communicate(timeout=240)
    assert child.returncode == 0, err
    return Run(out.strip().splitlines()[-1], cwd, database_url)


@pytest.fixture(scope="module")
def runs(postgres_url: str | None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run | None]:
    """A finished run on Postgres (None without one) and one on the embedded SQLite file,
    made side by side."""
    started: dict[str, tuple[subprocess.Popen[str], Path, str | None]] = {}
    for kind, url in (("postgres", postgres_url), ("sqlite", None)):
        if kind == "sqlite" or url:
            cwd = tmp_path_factory.mktemp(f"readme-{kind}")
            started[kind] = (start_pipeline_run(cwd, url), cwd, url)
    done: dict[str, Run | None] = {"postgres": None}
    for kind, (child, cwd, url) in started.items():
        done[kind] = finished(child, cwd, url)
    return done


@pytest.fixture
def postgres_run(runs: dict[str, Run | None]) -> Run:
    run = runs["postgres"]
    if run is None:
        pytest.skip("no Postgres: the README's SQL is run against Postgres (CI always has one)")
    assert PSQL, (
        "psql is needed to run the README's SQL as an operator would: apt-get install postgresql-client"
    )
    return run


@pytest.fixture
def sqlite_run(runs: dict[str, Run | None]) -> Run:
    run = runs["sqlite"]
    assert run is not None
    return run


def psql(run: Run, sql: str, *options: str) -> subprocess.CompletedProcess[str]:
    """`sql` through the README's psql line, as a file (psql interpolates variables there, not
    in -c), stopping at the first error."""
    line = readme_line("psql ")
    assert run.database_url
    env = {**os.environ, "PIPELINE_DATABASE_URL": run.database_url, "RUN": run.run_id}
    return subprocess.run(
        ["sh", "-c", f"{line} -X -q -v ON_ERROR_STOP=1 {' '.join(options)} -f -"],
        input=sql,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def sqlite_rows(run: Run, sql: str) -> list[str]:
    """`sql` with `:'run'` written as the quoted id, through the README's sqlite3 line; its rows."""
    written = sql.replace(":'run'", f"'{run.run_id}'")
    line = readme_line("sqlite3 ")
    if SQLITE3 is None:  # the same file, through Python's sqlite3
        path = run.cwd / line.split()[-1]
        with sqlite3.connect(path) as conn:
            return ["|".join(map(str, row)) for row in conn.execute(written).fetchall()]
    done = subprocess.run(
        ["sh", "-c", f"{line} -bail -batch"], input=written, cwd=run.cwd, capture_output=True, text=True
    )
    assert done.returncode == 0 and not done.stderr, f"{written}\n{done.stderr}"
    return [row for row in done.stdout.splitlines() if row]


def test_the_readme_has_queries_and_names_the_run_as_psql_reads_it() -> None:
    assert len([q for block in blocks("sql", (README,)) for q in statements(block)]) >= 3
    assert len([q for block in blocks("sql", (QUERYING,)) for q in statements(block)]) >= 5
    queries = [q for block in blocks("sql") for q in statements(block)]
    # `:run` is a syntax error in psql (its unquoted form); `:'run'` is the quoted literal.
    assert not [q for q in queries if re.search(r"(?<!')\s*:run\b", q.replace(":'run'", ""))]
    assert any(":'run'" in q for q in queries)


def test_every_sql_block_runs_in_psql_as_written(postgres_run: Run) -> None:
    for block in blocks("sql"):
        done = psql(postgres_run, block)
        assert done.returncode == 0 and not done.stderr, f"{block}\n{done.stderr}"
        for query in statements(block):
            rows = psql(postgres_run, query, "-A", "-t").stdout.splitlines()
            assert rows or any(m in query for m in MAY_BE_EMPTY), f"no row: {query}"


def test_every_sql_block_runs_in_sqlite3_with_the_id_written_in(sqlite_run: Run) -> None:
    for block in blocks("sql"):
        sqlite_rows(sqlite_run, block)
        for query in statements(block):
            rows = sqlite_rows(sqlite_run, query)
            assert rows or any(m in query for m in MAY_BE_EMPTY), f"no row: {query}"


def test_psql_can_take_the_newest_run_as_the_readme_says(postgres_run: Run) -> None:
    found = re.search(r"`(select id as run from runs [^`]*\\gset)`", README.read_text())
    assert found, "the README no longer says how to take the newest run"
    done = psql(postgres_run, f"{found[1]}\n\\echo :'run'\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"'{postgres_run.run_id}'"


def test_the_default_model_costs_its_list_price_and_documents_sort_by_it(postgres_run: Run) -> None:
    assert postgres_run.database_url
    price = list_prices()[default("llm_model")]  # what the run's processes priced with
    with session_scope(get_engine(postgres_run.database_url)) as session:
        calls = list(session.scalars(select(LLMCall).where(LLMCall.run_id == postgres_run.run_id)))
    assert calls and {c.model for c in calls} == {default("llm_model")}
    for call in calls:
        assert call.cost_usd == pytest.approx(
            price.of(call.prompt_tokens, call.completion_tokens, call.cached_tokens)
        )
    query = next(q for b in blocks("sql") for q in statements(b) if "from document_costs" in q)
    rows = psql(postgres_run, query, "-A", "-t").stdout.splitlines()
    cells = [row.rsplit("|", 2)[1:] for row in rows]  # calls, cost_usd ('' for NULL)
    assert [calls for calls, cost in cells if not cost] == ["0"]  # the skipped file, last
    costs = [float(cost) for _, cost in cells[:-1]]
    assert len(costs) == FILINGS and all(c > 0 for c in costs) and costs == sorted(costs, reverse=True)
    assert cells[-1] == ["0", ""]
