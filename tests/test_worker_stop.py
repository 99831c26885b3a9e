"""A worker asked to stop (Celery's warm shutdown sets `Context.stopping`) waits for the calls it
has in flight, not for every chunk of every document it holds: a document whose chunks are not
begun goes back to the queue, answered chunks kept, and the next worker finishes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from pipeline.context import Context
from pipeline.core.errors import Deferred
from pipeline.core.settings import get_settings
from pipeline.extraction import extract as extracting
from pipeline.ingest.producer import prepare_run
from pipeline.llm.client import LLMClient
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Chunk, Document
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.synth_filings import write_filings


def test_a_stopping_worker_hands_its_document_back_unasked_and_the_next_one_extracts_it(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    write_filings(tmp_path / "one", 1, seed=4243, sizes=[30_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    (document_id,) = prepare_run(engine, get_settings(), [str(tmp_path / "one")]).document_ids
    with SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        settings = get_settings().model_copy(update={"llm_base_url": sim.base_url})
        stopping = Context(settings, engine, LLMClient(settings, pool_size=1))
        stopping.stopping.set()
        try:
            with pytest.raises(Deferred, match="the worker is stopping"):
                extracting.extract_document(stopping, document_id)
        finally:
            stopping.llm.close()
        assert sim.stats()["requests_total"] == 0, "no chunk asked for once the worker is stopping"
        with session_scope(engine) as session:
            status = session.scalar(select(Document.status).where(Document.id == document_id))
            chunks = session.scalars(select(Chunk).where(Chunk.document_id == document_id)).all()
            assert status != "extracted" and chunks and all(c.result is None for c in chunks)
        running = Context(settings, engine, LLMClient(settings, pool_size=1))
        try:
            assert extracting.extract_document(running, document_id) == "extracted"
        finally:
            running.llm.close()
        assert sim.stats()["requests_total"] >= len(chunks)
