"""The Batch API's pure parts: packing lines into files, reading output lines, naming requests,
and deadlines as users write them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from pipeline.core.deadline import parse_deadline
from pipeline.llm.batch import FileLimits, Request, _output_line, custom_id, pack, parse_custom_id


def _requests(count: int, tokens: int = 100) -> Iterator[Request]:
    for i in range(count):
        yield Request(i, custom_id(i, "v3:abc", "gpt-4o-mini"), {"model": "gpt-4o-mini", "n": i}, tokens)


def test_a_file_is_packed_within_its_limits_and_the_rest_is_not_read() -> None:
    source = _requests(10)
    packed, over = pack(source, FileLimits(max_requests=4, max_bytes=1 << 20, max_tokens=0))
    lines = [json.loads(line) for line in packed.handle.read().splitlines()]
    assert [line["custom_id"] for line in lines] == [custom_id(i, "v3:abc", "gpt-4o-mini") for i in range(4)]
    assert all(line["url"] == "/v1/chat/completions" and line["method"] == "POST" for line in lines)
    assert over is not None and over.chunk_id == 4
    assert next(source).chunk_id == 5, "pack read no further than the request that did not fit"
    packed, over = pack(_requests(3, tokens=400), FileLimits(100, 1 << 20, max_tokens=1_000))
    assert packed.chunk_ids == [0, 1] and over is not None and over.chunk_id == 2


def test_a_request_too_big_for_any_file_comes_back_with_an_empty_file() -> None:
    packed, over = pack(_requests(2, tokens=5_000), FileLimits(100, 1 << 20, max_tokens=1_000))
    assert packed.chunk_ids == [] and over is not None and over.chunk_id == 0


def test_output_lines_are_read_whatever_shape_their_errors_have() -> None:
    ok = _output_line(
        json.dumps({"custom_id": "7|v3|m", "response": {"status_code": 200, "body": {"choices": [{}]}}})
    )
    assert ok.answered and ok.error is None
    for raw in (
        json.dumps({"custom_id": "7|v3|m", "response": None, "error": "batch_expired"}),
        json.dumps({"custom_id": "7|v3|m", "error": {"code": "batch_expired", "message": "expired"}}),
        json.dumps(
            {"custom_id": "7|v3|m", "response": {"status_code": 500, "body": {"error": {"message": "x"}}}}
        ),
        json.dumps(["not", "an", "object"]),
        "{broken",
    ):
        line = _output_line(raw)
        assert not line.answered and line.error, raw
    assert parse_custom_id(custom_id(12, "v3:0a1b2c", "org/model")) == (12, "v3:0a1b2c", "org/model")
    assert parse_custom_id("someone-else's-id") is None


def test_deadlines_are_a_time_of_day_or_a_timestamp() -> None:
    now = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
    tomorrow = parse_deadline("06:00", now)
    assert tomorrow > now and (tomorrow - now).total_seconds() <= 24 * 3600
    assert tomorrow.astimezone().hour == 6 and tomorrow.astimezone().minute == 0
    assert parse_deadline("2026-12-02T06:00:00Z", now) == datetime(2026, 12, 2, 6, 0, tzinfo=UTC)
    for bad in ("25:00", "tomorrow", "6 am"):
        with pytest.raises(ValueError, match="deadline"):
            parse_deadline(bad, now)
