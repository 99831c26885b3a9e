"""Errors that retrying cannot fix fail at once, with the reason in words: against a simulator
that refuses as providers do (wrong key, unknown model, context exceeded, unsupported parameter)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from pipeline.context import Context
from pipeline.core.errors import ProviderRejected
from pipeline.core.settings import Settings, get_settings
from pipeline.extraction import extract as extracting
from pipeline.extraction.schemas import FilingExtraction
from pipeline.ingest.producer import prepare_run
from pipeline.llm.client import CallRecord, LLMClient
from pipeline.llm.prompts import extract_messages
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document
from pipeline_dev.sim import SimConfig, SimServer

FILING = "Item 7. Revenue was $12.5 million in fiscal 2023. Item 1A. Risk: suppliers may fail."
RIGHT_KEY, WRONG_KEY = "sk-right-0123456789abcdef", "sk-wrong-fedcba9876543210"
CASES: list[tuple[str, SimConfig, dict[str, Any], str]] = [
    ("key", SimConfig(api_key=RIGHT_KEY), {"llm_api_key": WRONG_KEY}, "refused the API key"),
    ("model", SimConfig(served_models=("another-model",)), {}, "no such model"),
    ("context", SimConfig(context_tokens=500), {}, "exceeds the model's context window"),
    ("parameter", SimConfig(unsupported_params=("temperature",)), {}, "does not take a parameter"),
]


@pytest.mark.parametrize(("kind", "config", "settings", "reason"), CASES, ids=[c[0] for c in CASES])
def test_a_call_the_provider_refuses_for_good_fails_at_once_with_the_reason(
    kind: str, config: SimConfig, settings: dict[str, Any], reason: str
) -> None:
    with SimServer(dataclasses.replace(config, p50_s=0, p95_s=0)) as sim:
        client = LLMClient(Settings(_env_file=None, llm_base_url=sim.base_url, **settings), pool_size=1)  # type: ignore[call-arg]
        records: list[CallRecord] = []
        try:
            with pytest.raises(ProviderRejected, match=reason) as raised:
                client.structured(
                    extract_messages(FILING, 0, 1),
                    FilingExtraction,
                    stage="extract",
                    max_tokens=800,
                    sink=records.append,
                )
        finally:
            client.close()
        assert sim.stats()["requests_total"] == 1, "not retried"
    assert [r.status for r in records] == ["rejected"]
    assert WRONG_KEY not in str(raised.value) and WRONG_KEY[5:] not in str(records[0].error)


def test_a_document_refused_for_good_fails_after_one_call(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "filing.txt").write_text(FILING * 20)
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    (document_id,) = prepare_run(engine, get_settings(), [str(tmp_path)]).document_ids
    with SimServer(SimConfig(p50_s=0, p95_s=0, served_models=("another-model",))) as sim:
        settings = get_settings().model_copy(update={"llm_base_url": sim.base_url})
        ctx = Context(settings, engine, LLMClient(settings, pool_size=1))
        attempt = extracting.Attempt()
        try:
            with pytest.raises(ProviderRejected) as raised:
                extracting.extract_document(ctx, document_id, attempt=attempt)
            extracting.fail(ctx, document_id, str(raised.value), attempt)
        finally:
            ctx.llm.close()
        assert sim.stats()["requests_total"] == 1
    with session_scope(engine) as session:
        status, error = session.execute(
            select(Document.status, Document.error).where(Document.id == document_id)
        ).one()
    assert status == "failed" and error.startswith("the endpoint has no such model (PIPELINE_LLM_MODEL)")
