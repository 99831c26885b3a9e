"""Claiming a run's summaries for partial syntheses, against the real database: a batch once
they fill it, never a summary twice (workers claim concurrently), and a failed partial's
summaries given back."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import Engine, select

from pipeline.core.settings import get_settings
from pipeline.ingest.producer import prepare_run
from pipeline.storage import partials
from pipeline.storage.db import session_scope
from pipeline.storage.models import Extraction

SUMMARY_TOKENS = 10
"""Each test summary is 40 characters: 10 tokens by the estimate."""


def _summarized(engine: Engine, tmp_path: Path, count: int) -> list[int]:
    """A run of `count` documents, each extracted with a summary; their ids."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (tmp_path / f"f{i:03}.txt").write_text(f"Filing {i}. " + "Revenue was stated. " * 50)
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    with session_scope(engine) as session:
        for doc_id in plan.document_ids:
            summary = f"Summary of document {doc_id}.".ljust(SUMMARY_TOKENS * 4, ".")
            session.add(
                Extraction(
                    document_id=doc_id,
                    run_id=plan.run_id,
                    data={},
                    summary=summary,
                    model="m",
                    prompt_version="v",
                )
            )
    return sorted(plan.document_ids)


def _claim(engine: Engine, document_id: int, min_tokens: int, max_tokens: int) -> partials.Claim | None:
    """A claim and what it holds (None: nothing claimed)."""
    with session_scope(engine) as session:
        partial_id = partials.claim_batch(session, document_id, min_tokens, max_tokens)
    if partial_id is None:
        return None
    with session_scope(engine) as session:
        return partials.load_claim(session, partial_id)


def test_summaries_are_claimed_in_batches_once_they_fill_one(engine: Engine, tmp_path: Path) -> None:
    ids = _summarized(engine, tmp_path / "a", 10)
    other_run = _summarized(engine, tmp_path / "b", 5)
    assert _claim(engine, ids[0], 110, 200) is None, "100 tokens wait for more"
    assert _claim(engine, other_run[0], 60, 200) is None, "another run's summaries are not this run's"
    assert _claim(engine, other_run[0], 5, 5) is None, "one summary alone is no batch"

    first = _claim(engine, ids[0], 80, 100)
    assert first is not None and len(first.summaries) == 10
    assert _claim(engine, ids[-1], 10, 100) is None, "every summary of the run is in a partial"


def test_concurrent_claims_never_take_a_summary_twice(engine: Engine, tmp_path: Path) -> None:
    ids = _summarized(engine, tmp_path, 40)
    with ThreadPoolExecutor(max_workers=8) as pool:
        claims = [c for c in pool.map(lambda d: _claim(engine, d, 50, 60), ids) if c is not None]
    with session_scope(engine) as session:
        owners = session.execute(
            select(Extraction.document_id, Extraction.partial_id).where(Extraction.document_id.in_(ids))
        ).all()
    taken = [partial for _, partial in owners if partial is not None]
    assert claims and sum(len(c.summaries) for c in claims) == len(taken)
    assert sorted({c.partial_id for c in claims}) == sorted(set(taken))


def test_a_released_partial_gives_its_summaries_back_and_only_answered_partials_count(
    engine: Engine, tmp_path: Path
) -> None:
    ids = _summarized(engine, tmp_path, 6)
    failed = _claim(engine, ids[0], 30, 30)
    assert failed is not None
    with session_scope(engine) as session:
        partials.release(session, failed.partial_id)
    again = _claim(engine, ids[0], 30, 30)
    assert again is not None and again.summaries == failed.summaries
    rest = _claim(engine, ids[0], 30, 30)
    assert rest is not None
    with session_scope(engine) as session:
        partials.complete(session, again.partial_id, "answer over the first three")
        assert partials.completed(session, again.run_id) == {again.partial_id: "answer over the first three"}
