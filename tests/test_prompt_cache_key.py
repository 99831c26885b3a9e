"""`prompt_cache_key`: sent where the endpoint takes it; an endpoint that ignores it works as
before, one that refuses it (a 400 naming it) is asked again at once without it, and every worker
then leaves it out, with the reason logged once. Against the simulator, through the real client."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from pipeline.core import keys
from pipeline.core.settings import Settings
from pipeline.extraction.schemas import FilingExtraction
from pipeline.llm import cache_keys
from pipeline.llm.batch import BatchAPI
from pipeline.llm.client import CallRecord, LLMClient
from pipeline.llm.prompts import extract_messages
from pipeline.llm.ratelimit import RedisLimiter
from pipeline_dev.sim import SimConfig, SimServer
from tests.test_sim import RESPONSE_FORMAT
from tests.test_sim_batches import QUICK, request_line, submit, wait
from tests.test_sim_batches import client as sdk_client

FILING = "Item 7. Revenue was $12.5 million in fiscal 2023. Item 1A. Risk: suppliers may fail."
KEY = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def client_for(redis_url: str) -> Iterator[Any]:
    """Clients as workers hold them (each process's knowledge starts empty), on the session's Redis."""
    made: list[LLMClient] = []

    def build(base_url: str) -> LLMClient:
        cache_keys.forget()  # a new process
        settings = Settings(_env_file=None, llm_base_url=base_url, redis_url=redis_url)  # type: ignore[call-arg]
        client = LLMClient(settings, pool_size=1, limiter=RedisLimiter.from_settings(settings, 1))
        made.append(client)
        return client

    yield build
    for client in made:
        client.close()
    cache_keys.forget()


def _ask(client: LLMClient) -> list[CallRecord]:
    records: list[CallRecord] = []
    answer = client.structured(
        extract_messages(FILING, 0, 1),
        FilingExtraction,
        stage="extract",
        max_tokens=800,
        sink=records.append,
        cache_key=KEY,
    )
    assert answer.revenue_usd == 12_500_000
    return records


def test_an_endpoint_that_takes_or_ignores_the_key_is_sent_it_and_answers_as_before(client_for: Any) -> None:
    with SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        client = client_for(sim.base_url)
        assert [r.status for r in _ask(client)] == ["ok"]
        assert sim.stats()["requests_total"] == 1
        request = client.structured_request(
            extract_messages(FILING, 0, 1), FilingExtraction, model="m", max_tokens=10, cache_key=KEY
        )
        assert request.body()["prompt_cache_key"] == KEY, "the key goes in the body the SDK sends"
        body, _ = client.batch_body(extract_messages(FILING, 0, 1), FilingExtraction, "m", 10, KEY)
        assert body["prompt_cache_key"] == KEY, "and in a Batch API line's"


def test_a_refused_key_is_dropped_at_once_for_every_worker_and_said_once(
    client_for: Any, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    conn: redis.Redis = redis.Redis.from_url(redis_url)
    with SimServer(SimConfig(p50_s=0, p95_s=0, reject_prompt_cache_key=True)) as sim:
        stored = keys.CACHE_KEY.of(cache_keys.tag(sim.base_url))
        conn.delete(stored)
        try:
            caplog.set_level(logging.WARNING, logger="pipeline.llm.cache_keys")
            first = client_for(sim.base_url)
            # The refusal costs no failure, no retry wait and no record: the call goes again without it.
            assert [r.status for r in _ask(first)] == ["ok"]
            assert sim.stats()["requests_total"] == 2 and conn.get(stored) == b"refused"
            assert [r.status for r in _ask(first)] == ["ok"]
            assert sim.stats()["requests_total"] == 3, "the same worker no longer sends it"

            other = client_for(sim.base_url)  # another worker: learns it from Redis
            assert [r.status for r in _ask(other)] == ["ok"]
            assert sim.stats()["requests_total"] == 4
            body, _ = other.batch_body(extract_messages(FILING, 0, 1), FilingExtraction, "m", 10, KEY)
            assert "prompt_cache_key" not in body, "nor do its batch lines"

            said = [r.getMessage() for r in caplog.records if "prompt_cache_key" in r.getMessage()]
            assert len(said) == 1, said
            assert "Unrecognized request argument supplied: prompt_cache_key" in said[0]
        finally:
            conn.delete(stored)


def test_a_rejection_that_names_another_parameter_is_not_taken_for_the_key() -> None:
    keys_of_endpoint = cache_keys.CacheKeys("http://nowhere.invalid/v1", None)
    try:
        assert not keys_of_endpoint.heard(400, '{"error": {"message": "Unknown parameter: top_logprobs"}}')
        assert not keys_of_endpoint.heard(500, "prompt_cache_key")  # an outage is not a refusal
        assert not keys_of_endpoint.refused()
        assert keys_of_endpoint.heard(422, "extra fields not permitted: prompt_cache_key")
        assert keys_of_endpoint.refused()
    finally:
        cache_keys.forget()


def test_a_batch_line_refused_for_its_key_is_recognised_as_the_refusal() -> None:
    """A Batch API endpoint that refuses the key fails each line that carries it (an error-file
    line with the 400); reading that line records the refusal, so later files go without it."""
    line = request_line("chunk-1", prompt_cache_key=KEY, response_format=RESPONSE_FORMAT)
    with SimServer(SimConfig(**QUICK, batch_duration_s=0.1, reject_prompt_cache_key=True)) as sim:
        batch, _ = wait(sdk_client(sim), submit(sdk_client(sim), [line]))
        api = BatchAPI(sim.base_url, "sk-test", 10.0)
        try:
            (read,) = list(api.lines(batch.error_file_id or ""))
        finally:
            api.close()
    assert read.status_code == 400 and not read.answered
    endpoint = cache_keys.CacheKeys(sim.base_url, None)
    try:
        assert endpoint.heard(read.status_code, read.error or json.dumps(read.body))
        assert endpoint.refused()
    finally:
        cache_keys.forget()
