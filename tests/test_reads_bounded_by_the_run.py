"""Reads bounded by the run (issue 49): the new queries give what the old ones gave, on a
database of plausible nights (the growth regime's seed), and the regime itself runs at a tiny
size. Postgres only: the seed is Postgres SQL, and Postgres is where the plans matter."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text, update

from pipeline.runs.status import list_runs, run_status
from pipeline.storage.db import get_engine, session_scope, upgrade
from pipeline.storage.models import Chunk, LLMCall, Run
from pipeline.storage.usage import _called_chunks
from pipeline_dev.bench.growth import growth, seed
from pipeline_dev.bench.regimes import BenchConfig
from tests.conftest import new_database

ROOT = Path(__file__).resolve().parents[1]
BREAKDOWNS = ("reclaimed", "tiers", "confidence", "batches")
"""What `run_status` adds run by run to the figures `pipeline runs` reads in one statement."""


@pytest.fixture(scope="module")
def nights(postgres_url: str | None) -> Iterator[str]:
    """A database of six nights of 12 documents, one of them pruned's totals kept."""
    if postgres_url is None:
        pytest.skip("no Postgres server reachable")
    with new_database(postgres_url, "pipeline_reads") as url:
        upgrade(url)
        engine = get_engine(url)
        seed(engine, "night ", 0, 5, 12)
        with session_scope(engine) as session:
            oldest = session.scalar(select(Run.id).order_by(Run.created_at).limit(1))
            before = {"calls": 3, "prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.5}
            before |= {"priced_calls": 3, "failed_calls": 1, "chunks": 7, "chunks_done": 6}
            session.execute(update(Run).where(Run.id == oldest).values(pruned={"before": before}))
        yield url


def _migration(name: str) -> Any:
    path = ROOT / "migrations" / "versions" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runs_reads_in_one_statement_what_status_reads_run_by_run(nights: str) -> None:
    engine = get_engine(nights)
    listed = list_runs(engine, 20)
    assert len(listed) == 6 and [v.created_at for v in listed] == sorted(
        (v.created_at for v in listed), reverse=True
    )
    for view in listed:
        whole = run_status(engine, view.run_id).as_dict()
        assert {k: v for k, v in view.as_dict().items() if k not in BREAKDOWNS and k != "elapsed_s"} == {
            k: v for k, v in whole.items() if k not in BREAKDOWNS and k != "elapsed_s"
        }
    assert [v.as_dict() for v in list_runs(engine, 3, detail=True)] == [
        run_status(engine, v.run_id).as_dict() for v in listed[:3]
    ]
    pruned = next(v for v in listed if v.llm_calls == 3)
    assert (pruned.chunks_total, pruned.chunks_done, pruned.llm_calls_failed) == (7, 6, 1)


def _called_chunks_before(session: Any, run_id: str) -> tuple[int, int]:
    """The query `_called_chunks` made until issue 49 (a scan of every chunk)."""
    called = (
        select(LLMCall.document_id, LLMCall.chunk_idx)
        .where(LLMCall.run_id == run_id, LLMCall.stage == "extract")
        .distinct()
        .subquery()
    )
    count, tokens = session.execute(
        select(func.count(), func.coalesce(func.sum(Chunk.token_estimate), 0)).join(
            called, (Chunk.document_id == called.c.document_id) & (Chunk.idx == called.c.chunk_idx)
        )
    ).one()
    return int(count), int(tokens)


def test_the_plans_history_counts_the_chunks_it_counted(nights: str) -> None:
    with session_scope(get_engine(nights)) as session:
        for run_id in session.scalars(select(Run.id)):
            assert _called_chunks(session, run_id) == _called_chunks_before(session, run_id)
            assert _called_chunks(session, run_id)[0] > 0


def test_the_cost_views_give_the_rows_the_old_ones_gave(nights: str) -> None:
    old = _migration("0021_reads_bounded_by_the_run")
    with get_engine(nights).connect() as conn:
        for view, body, key in (
            ("document_costs", old.OLD_DOCUMENT_COSTS, "document_id"),
            ("run_costs", old.OLD_RUN_COSTS, "run_id"),
        ):
            now = conn.execute(text(f"select * from {view} order by {key}")).all()
            before = conn.execute(text(f"select * from ({body}) v order by {key}")).all()
            assert now == before and now, view


def test_the_reviewed_views_give_the_rows_the_old_ones_gave(nights: str) -> None:
    """0024's reviewed_extractions (joined on the run too) and latest_extractions (one ordered
    pass) against 0018's, with corrections that change a company, a fiscal year and a revenue
    (rolled back afterwards)."""
    new = _migration("0024_reviewed_views_by_the_run")
    with get_engine(nights).connect() as conn:
        picked = conn.execute(
            text("select id, run_id from documents where status = 'extracted' order by id limit 3")
        ).all()
        for (document_id, run_id), (field, value) in zip(
            picked, [("company", "Company 1"), ("fiscal_year", "2031"), ("revenue_usd", "5.0")], strict=True
        ):
            conn.execute(
                text(
                    "insert into corrections (run_id, document_id, field, value, reviewer, reviewed_at, created_at)"
                    " values (:run, :doc, :field, :value, 'a reviewer', now(), now())"
                ),
                {"run": run_id, "doc": document_id, "field": field, "value": value},
            )
        for view, body, old, key in (
            ("reviewed_extractions", new.REVIEWED_EXTRACTIONS, new.OLD_REVIEWED_EXTRACTIONS, "extraction_id"),
            ("latest_extractions", new.LATEST_EXTRACTIONS, new.OLD_LATEST_EXTRACTIONS, "company"),
        ):
            now = conn.execute(text(f"select * from {view} order by {key}")).all()
            if view == "latest_extractions":  # its old body reads the view it is built on
                old = old.replace("reviewed_extractions", f"({new.OLD_REVIEWED_EXTRACTIONS})")
            before = conn.execute(text(f"select * from ({old}) v order by {key}")).all()
            assert now == before and now, view
            assert conn.execute(text(f"select * from ({body}) v order by {key}")).all() == now, view
        assert any(
            row.company == "Company 1" for row in conn.execute(text("select company from latest_extractions"))
        )
        conn.rollback()


def test_the_growth_regime_measures_every_read_path_at_both_sizes(
    postgres_url: str | None, tmp_path: Path
) -> None:
    """At a tiny size (5 documents a night): no time is asserted, only that each path was measured."""
    if postgres_url is None:
        pytest.skip("no Postgres server reachable")
    result = growth(BenchConfig(database_url=postgres_url, redis_url="", work_dir=tmp_path, scale=0.005))
    assert result["documents_grown"] == 10 * result["documents"] > 0
    paths = result["paths"]
    assert {"status", "runs", "runs --json", "report", "plan history"} <= set(paths)
    assert sum(name.startswith("sql: ") for name in paths) >= 10
    for name in ("status", "runs", "plan history"):
        assert all(paths[name]["pages"]) and paths[name]["statements"] >= 1
    assert paths["runs"]["statements"] == 2, "the ids, then one summary statement for every run listed"


def test_0023_gives_each_stored_chunk_its_documents_run(postgres_url: str | None) -> None:
    """Chunks stored before 0023 get their document's run, and the run's counts stay those of
    the join through documents (which the counts read until 0023)."""
    if postgres_url is None:
        pytest.skip("no Postgres server reachable")
    from alembic import command

    from pipeline.storage.db import alembic_config

    with new_database(postgres_url, "pipeline_0023") as url:
        upgrade(url)
        engine = get_engine(url)
        seed(engine, "night ", 0, 2, 5)
        command.downgrade(alembic_config(url), "0022")
        command.upgrade(alembic_config(url), "head")
        with engine.connect() as conn:
            wrong = conn.execute(
                text(
                    "select count(*) from chunks c join documents d on d.id = c.document_id where c.run_id <> d.run_id or c.run_id is null"
                )
            ).scalar_one()
            joined = conn.execute(
                text(
                    "select d.run_id, count(*), count(c.completed_at) from chunks c"
                    " join documents d on d.id = c.document_id group by d.run_id order by d.run_id"
                )
            ).all()
        assert wrong == 0
        assert joined and [
            (r.run_id, r.chunks_total, r.chunks_done)
            for r in sorted(list_runs(engine, 3), key=lambda v: v.run_id)
        ] == [tuple(row) for row in joined]
