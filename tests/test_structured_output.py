"""Structured output on servers that do not all take `json_schema`: `auto` steps down and every
worker starts from what it found; a configured mode that is rejected fails at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

from pipeline.core.errors import FormatRejected
from pipeline.core.settings import Settings
from pipeline.extraction.schemas import FilingExtraction
from pipeline.llm import structured
from pipeline.llm.client import CallRecord, LLMClient
from pipeline.llm.prompts import extract_messages
from pipeline.llm.ratelimit import RedisLimiter
from pipeline.runs.status import limiter_views
from pipeline_dev.sim import SimConfig, SimServer
from tests.conftest import eventually

FILING = "Item 7. Revenue was $12.5 million in fiscal 2023. Item 1A. Risk: suppliers may fail."


@pytest.fixture
def client_for(redis_url: str) -> Iterator[object]:
    made: list[LLMClient] = []

    def build(base_url: str, mode: str = "auto") -> LLMClient:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            llm_base_url=base_url,
            redis_url=redis_url,
            llm_model="shape-test",
            llm_structured_output=mode,
        )
        client = LLMClient(settings, pool_size=2, limiter=RedisLimiter.from_settings(settings, 2))
        made.append(client)
        return client

    yield build
    for client in made:
        client.close()


def _extract(client: LLMClient, records: list[CallRecord]) -> FilingExtraction:
    return client.structured(
        extract_messages(FILING, 0, 1), FilingExtraction, stage="extract", max_tokens=800, sink=records.append
    )


def test_auto_steps_down_once_and_every_worker_starts_from_the_mode_found(
    client_for: object, redis_url: str
) -> None:
    """llama-cpp-python answers `json_schema` with HTTP 500 and takes `json_object` + schema."""
    with SimServer(SimConfig(p50_s=0, p95_s=0, rejected_shapes=("json_schema",), rejected_status=500)) as sim:
        conn: redis.Redis = redis.Redis.from_url(redis_url)
        conn.delete(structured.key(sim.base_url, "shape-test"))
        first_records: list[CallRecord] = []
        answer = _extract(client_for(sim.base_url), first_records)  # type: ignore[operator]
        assert answer.revenue_usd == 12_500_000
        assert [r.status for r in first_records] == ["rejected", "ok"], (
            "one rejection, not retried as an outage"
        )
        assert conn.get(structured.key(sim.base_url, "shape-test")) == b"json_object_schema"

        other = client_for(sim.base_url)  # type: ignore[operator]  # another worker
        other_records: list[CallRecord] = []
        _extract(other, other_records)
        assert [r.status for r in other_records] == ["ok"]
        assert sim.stats()["errors_5xx"] == 1
        shown = {v["model"]: v["structured_output"] for v in limiter_views(other.settings)}
        assert shown["shape-test"] == "json_object_schema (found by auto)", "pipeline status says so"
        conn.delete(structured.key(sim.base_url, "shape-test"))


def test_with_no_structured_output_at_all_the_schema_goes_in_the_prompt(
    client_for: object, redis_url: str
) -> None:
    shapes = ("json_schema", "json_object_schema", "json_object")
    with SimServer(SimConfig(p50_s=0, p95_s=0, rejected_shapes=shapes, rejected_status=400)) as sim:
        records: list[CallRecord] = []
        answer = _extract(client_for(sim.base_url), records)  # type: ignore[operator]
        assert answer.revenue_usd == 12_500_000
        assert [r.status for r in records] == ["rejected"] * 3 + ["ok"]
        assert redis.Redis.from_url(redis_url).get(structured.key(sim.base_url, "shape-test")) == b"prompt"
        redis.Redis.from_url(redis_url).delete(structured.key(sim.base_url, "shape-test"))


def test_a_configured_mode_the_endpoint_rejects_fails_at_once_with_the_reason(client_for: object) -> None:
    with SimServer(SimConfig(p50_s=0, p95_s=0, rejected_shapes=("json_schema",), rejected_status=500)) as sim:
        records: list[CallRecord] = []
        with pytest.raises(FormatRejected, match="rejects structured output as json_schema"):
            _extract(client_for(sim.base_url, "json_schema"), records)  # type: ignore[operator]
        assert [r.status for r in records] == ["rejected"]
        assert sim.stats()["requests_total"] == 1


def test_auto_lets_one_call_try_a_mode_and_then_every_waiting_call_go_together() -> None:
    """Until a call of the process is answered in the current mode, `auto` lets one call at a
    time try it; once one is answered, the calls that waited all go at once. They went one
    after another through a lock, each handing it to the next only once it had the interpreter:
    in a worker's first seconds, 32 threads starting at once, the last waited seconds (at a load
    of 30: 2.3 s, the probe answered in 1.4 s). A probe that fails hands the turn to one waiter."""
    modes = structured.ModeStore("auto", None)
    endpoint, model = "http://endpoint.invalid/v1", "shape-test"
    trying, answer = threading.Event(), threading.Event()
    inside: list[str] = []
    together = threading.Barrier(2)
    failed: list[str] = []
    alone: list[bool] = []

    def first() -> None:
        try:
            with modes.probing(endpoint, model):
                trying.set()
                answer.wait()
                raise RuntimeError("refused")  # the first try fails: the turn goes to one waiter
        except RuntimeError as exc:
            failed.append(str(exc))

    def waiting(name: str) -> None:
        with modes.probing(endpoint, model):
            inside.append(name)
            if len(inside) == 1:  # the next try: the two others wait until it is answered
                try:
                    eventually("the others waiting", lambda: len(modes._turn._waiters) == 2, 30)  # type: ignore[attr-defined]
                    alone.append(True)
                except BaseException:
                    alone.append(False)
                modes.confirm(endpoint, model)
                return
            together.wait(timeout=60)  # the two others, side by side

    threads = [threading.Thread(target=first)]
    threads[0].start()
    trying.wait()
    threads += [threading.Thread(target=waiting, args=(f"w{i}",)) for i in range(3)]
    for thread in threads[1:]:
        thread.start()
    eventually("three calls waiting for the probe", lambda: len(modes._turn._waiters) == 3)  # type: ignore[attr-defined]
    assert inside == []
    answer.set()
    for thread in threads:
        thread.join()
    assert failed == ["refused"]
    assert alone == [True]
    assert sorted(inside) == ["w0", "w1", "w2"]
    assert not together.broken
