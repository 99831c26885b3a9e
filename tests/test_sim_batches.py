"""pipeline_dev.sim's Files and Batch APIs, through the real openai SDK (short durations)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest
from openai.types import Batch
from openai.types.chat import ChatCompletion

from pipeline.extraction.schemas import FilingExtraction
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.sim.batches import MAX_REQUESTS, check_input
from tests.test_sim import FILING, RESPONSE_FORMAT, messages

ENDPOINT = "/v1/chat/completions"
TERMINAL = ("completed", "failed", "expired", "cancelled")
QUICK = {"p50_s": 0.0, "seed": 5, "batch_validate_s": 0.05}


def client(sim: SimServer, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0, **kwargs)


def request_line(custom_id: str, document: str = FILING, **body: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": ENDPOINT,
        "body": {"model": "sim-1", "messages": messages(document), **body},
    }


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def submit(sdk: openai.OpenAI, lines: list[dict[str, Any]], **kwargs: Any) -> Batch:
    uploaded = sdk.files.create(file=("requests.jsonl", jsonl(lines)), purpose="batch")
    return sdk.batches.create(input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h", **kwargs)


def wait(sdk: openai.OpenAI, batch: Batch, until: tuple[str, ...] = TERMINAL) -> tuple[Batch, list[str]]:
    """Poll until the batch's status is in `until`; returns it and every status seen."""
    seen = [batch.status]
    deadline = time.monotonic() + 10
    while batch.status not in until:
        assert time.monotonic() < deadline, f"still {batch.status}"
        time.sleep(0.03)
        batch = sdk.batches.retrieve(batch.id)
        if batch.status != seen[-1]:
            seen.append(batch.status)
    return batch, seen


def download(sdk: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in sdk.files.content(file_id).text.splitlines()]


def test_a_batch_answers_every_line_once_as_the_endpoint_would() -> None:
    lines = [request_line(f"filing-{i}", response_format=RESPONSE_FORMAT) for i in range(12)]
    # rpm=1: the synchronous endpoint's limit leaves batch lines alone (a quota of their own).
    config = SimConfig(**QUICK, rpm=1, quantize=False, batch_duration_s=0.4)
    with SimServer(config) as sim:
        sdk = client(sim)
        batch = submit(sdk, lines, metadata={"night": "2026-01-31"})
        assert batch.status == "validating" and batch.request_counts is not None
        batch, seen = wait(sdk, batch)
        output = download(sdk, batch.output_file_id)
        stats = sim.stats()
        httpx.post(sim.base_url.replace("/v1", "/sim/reset"))
        after_reset = sim.stats()
    assert seen[0] == "validating" and "in_progress" in seen and seen[-1] == "completed"
    assert batch.id.startswith("batch_") and batch.object == "batch" and batch.endpoint == ENDPOINT
    assert batch.metadata == {"night": "2026-01-31"} and batch.model == "sim-1"
    assert batch.error_file_id is None and batch.errors is None
    assert batch.request_counts is not None and batch.request_counts.model_dump() == {
        "total": 12,
        "completed": 12,
        "failed": 0,
    }
    stamps = [batch.created_at, batch.in_progress_at, batch.finalizing_at, batch.completed_at]
    assert all(isinstance(s, int) for s in stamps) and stamps == sorted(s or 0 for s in stamps)
    assert batch.expires_at == batch.created_at + 86_400

    ids = [line["custom_id"] for line in output]
    assert sorted(ids) == sorted(line["custom_id"] for line in lines), "each answered once"
    assert ids != [line["custom_id"] for line in lines], "providers do not keep the input's order"
    for line in output:
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200 and line["response"]["request_id"]
        completion = ChatCompletion.model_validate(line["response"]["body"])
        answer = FilingExtraction.model_validate_json(completion.choices[0].message.content or "")
        assert answer.company == "Northwind Robotics Inc." and answer.revenue_usd == 1_234_500_000.0
        assert completion.usage is not None and completion.usage.prompt_tokens > 0
    usage = batch.usage
    assert usage is not None and usage.input_tokens == stats["batch_prompt_tokens"] > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens

    assert stats["batches_created"] == stats["batches_completed"] == 1
    assert stats["batch_lines_answered"] == 12 and stats["batch_lines_failed"] == 0
    assert stats["requests_total"] == stats["rejected_429"] == 0, "not the synchronous endpoint's"
    assert stats["batch_enqueued_tokens"] == 0, "a finished batch holds no tokens"
    assert after_reset["batches_created"] == after_reset["batch_lines_answered"] == 0


def test_a_bad_input_file_fails_the_batch_with_its_errors() -> None:
    duplicate = [request_line("a"), request_line("b"), request_line("a")]
    wrong_url = [request_line("a"), {**request_line("b"), "url": "/v1/completions"}]
    other_model = [request_line("a"), {**request_line("b"), "body": {"model": "gpt-x", "messages": []}}]
    with SimServer(SimConfig(**QUICK, batch_duration_s=0.1)) as sim:
        sdk = client(sim)
        submitted = [submit(sdk, lines) for lines in (duplicate, wrong_url, other_model)]
        garbled = sdk.files.create(file=("x.jsonl", b'{"custom_id": "a"\nnot json\n'), purpose="batch")
        submitted.append(
            sdk.batches.create(input_file_id=garbled.id, endpoint=ENDPOINT, completion_window="24h")
        )
        failed = [wait(sdk, batch)[0] for batch in submitted]
        stats = sim.stats()
    found = []
    for batch in failed:
        assert batch.status == "failed" and batch.failed_at is not None and batch.in_progress_at is None
        assert batch.output_file_id is None and batch.error_file_id is None
        assert batch.errors is not None and batch.errors.data
        found.append([(e.code, e.line, e.param) for e in batch.errors.data])
    assert found[0] == [("duplicate_custom_id", 3, "custom_id")]
    assert found[1] == [("url_mismatch", 2, "url")]
    assert found[2] == [("model_mismatch", 2, "body.model")]
    assert found[3] == [("invalid_json_line", 1, None), ("invalid_json_line", 2, None)]
    assert stats["batches_failed"] == 4 and stats["batch_lines_answered"] == 0


def test_input_limits_are_checked_before_any_line() -> None:
    assert [e["code"] for e in check_input(b"\n\n", ENDPOINT).errors] == ["empty_file"]
    too_many = check_input(b"{}\n" * (MAX_REQUESTS + 1), ENDPOINT)
    assert [e["code"] for e in too_many.errors] == ["too_many_tasks"]
    fine = check_input(jsonl([request_line("a", max_tokens=100)]), ENDPOINT)
    (line,) = fine.lines
    assert not fine.errors and fine.model == "sim-1" and line.chat is not None
    assert fine.tokens == line.tokens == line.chat.prompt_tokens + 100, "prompt + max_tokens"


def test_the_enqueued_token_limit_fails_a_batch_until_tokens_are_free() -> None:
    line_tokens = check_input(jsonl([request_line("x", max_tokens=1000)]), ENDPOINT).tokens
    lines = [request_line(f"r{i}", max_tokens=1000) for i in range(4)]
    limit = 6 * line_tokens  # one batch of 4 fits, two at once do not
    with SimServer(SimConfig(**QUICK, batch_duration_s=0.5, batch_enqueued_tokens=limit)) as sim:
        sdk = client(sim)
        first, _ = wait(sdk, submit(sdk, lines), until=("in_progress",))
        held = sim.stats()["batch_enqueued_tokens"]
        second, _ = wait(sdk, submit(sdk, lines))
        first, _ = wait(sdk, first)
        third, _ = wait(sdk, submit(sdk, lines))
        stats = sim.stats()
    assert held == 4 * line_tokens
    assert second.status == "failed" and second.errors is not None
    (error,) = second.errors.data or []
    assert error.code == "token_limit_exceeded" and error.line is None
    assert error.message == (
        "Enqueued token limit reached for sim-1 in organization org-pipeline-sim. "
        f"Limit: {limit:,} enqueued tokens. Please try submitting your requests again later."
    )
    assert first.status == third.status == "completed", "a finished batch frees its tokens"
    assert stats["batches_failed"] == 1 and stats["batches_completed"] == 2


def test_failed_lines_go_to_the_error_file() -> None:
    lines = [request_line(f"r{i}", document=f"Acme filing {i}.") for i in range(20)]
    lines.append({**request_line("no-messages"), "body": {"model": "sim-1", "messages": []}})
    lines.append(request_line("hook", document="Acme. [[sim:error]]"))
    with SimServer(SimConfig(**QUICK, batch_duration_s=0.2, batch_fail_rate=0.3)) as sim:
        sdk = client(sim)
        batch, _ = wait(sdk, submit(sdk, lines))
        output = download(sdk, batch.output_file_id)
        errors = download(sdk, batch.error_file_id)
        stats = sim.stats()
    assert batch.status == "completed" and batch.request_counts is not None
    assert batch.request_counts.completed == len(output) and batch.request_counts.failed == len(errors)
    assert sorted(line["custom_id"] for line in output + errors) == sorted(
        line["custom_id"] for line in lines
    )
    by_id = {line["custom_id"]: line for line in errors}
    assert by_id["no-messages"]["response"]["status_code"] == 400
    assert by_id["no-messages"]["response"]["body"]["error"]["type"] == "invalid_request_error"
    assert by_id["hook"]["response"]["status_code"] == 500
    drawn = [line for line in errors if line["custom_id"] not in ("no-messages", "hook")]
    assert 2 <= len(drawn) <= 12, "about 30% of 20"
    for line in drawn:
        assert line["error"] is None and line["response"]["status_code"] == 500
        assert line["response"]["body"]["error"]["type"] == "server_error"
    assert stats["batch_lines_failed"] == len(errors) and stats["batch_lines_answered"] == len(output)


def test_a_cancel_halfway_keeps_the_lines_done() -> None:
    lines = [request_line(f"r{i}", document=f"Acme filing {i}.") for i in range(20)]
    with SimServer(SimConfig(**QUICK, batch_duration_s=1.0)) as sim:
        sdk = client(sim)
        batch, _ = wait(sdk, submit(sdk, lines), until=("in_progress",))
        time.sleep(0.5)
        cancelling = sdk.batches.cancel(batch.id)
        batch, _ = wait(sdk, cancelling)
        output = download(sdk, batch.output_file_id)
        errors = download(sdk, batch.error_file_id)
        with pytest.raises(openai.ConflictError):
            sdk.batches.cancel(batch.id)
        stats = sim.stats()
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    assert batch.status == "cancelled" and batch.cancelled_at is not None and batch.completed_at is None
    assert 4 <= len(output) <= 16, f"about half of 20, got {len(output)}"
    assert all(line["response"]["status_code"] == 200 for line in output)
    assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    assert all(line["response"] is None for line in errors)
    assert sorted(line["custom_id"] for line in output + errors) == sorted(
        line["custom_id"] for line in lines
    )
    assert batch.request_counts is not None
    assert (batch.request_counts.completed, batch.request_counts.failed) == (len(output), len(errors))
    assert stats["batches_cancelled"] == 1 and stats["batch_lines_cancelled"] == len(errors)


def test_a_batch_past_its_window_expires_with_the_lines_done() -> None:
    lines = [request_line(f"r{i}", document=f"Acme filing {i}.") for i in range(20)]
    config = SimConfig(**QUICK, batch_duration_s=1.0, batch_expire_after_s=0.55)
    with SimServer(config) as sim:
        sdk = client(sim)
        batch, _ = wait(sdk, submit(sdk, lines))
        output = download(sdk, batch.output_file_id)
        errors = download(sdk, batch.error_file_id)
        stats = sim.stats()
    assert batch.status == "expired" and batch.expired_at is not None and batch.completed_at is None
    assert 4 <= len(output) <= 16, f"about half of 20, got {len(output)}"
    assert {line["error"]["code"] for line in errors} == {"batch_expired"}
    assert errors[0]["error"]["message"] == (
        "This request could not be executed before the completion window expired."
    )
    assert sorted(line["custom_id"] for line in output + errors) == sorted(
        line["custom_id"] for line in lines
    )
    assert stats["batches_expired"] == 1 and stats["batch_lines_expired"] == len(errors)


def test_batches_list_newest_first_in_pages() -> None:
    with SimServer(SimConfig(**QUICK, batch_duration_s=0.0)) as sim:
        sdk = client(sim)
        created = [submit(sdk, [request_line("a", document="Hi.")]).id for _ in range(5)]
        first = httpx.get(f"{sim.base_url}/batches", params={"limit": 2}).json()
        last = httpx.get(f"{sim.base_url}/batches", params={"limit": 2, "after": created[1]}).json()
        every = [b.id for b in sdk.batches.list(limit=2)]  # the SDK follows the pages
        with pytest.raises(openai.NotFoundError):
            sdk.batches.retrieve("batch_nope")
    newest_first = created[::-1]
    assert first["object"] == "list" and first["has_more"] is True
    assert [b["id"] for b in first["data"]] == newest_first[:2]
    assert (first["first_id"], first["last_id"]) == (newest_first[0], newest_first[1])
    assert [b["id"] for b in last["data"]] == [created[0]] and last["has_more"] is False
    assert every == newest_first


def test_files_upload_read_list_and_delete() -> None:
    with SimServer(SimConfig(**QUICK, api_key="sk-test")) as sim:
        sdk = client(sim)
        content = jsonl([request_line("a")])
        uploaded = sdk.files.create(file=("requests.jsonl", content), purpose="batch")
        other = sdk.files.create(file=("notes.txt", b"hello"), purpose="user_data")
        retrieved = sdk.files.retrieve(uploaded.id)
        downloaded = sdk.files.content(uploaded.id).content
        listed = [f.id for f in sdk.files.list()]
        only_batch = [f.id for f in sdk.files.list(purpose="batch")]
        with pytest.raises(openai.BadRequestError):  # a batch reads only purpose=batch files
            sdk.batches.create(input_file_id=other.id, endpoint=ENDPOINT, completion_window="24h")
        deleted = sdk.files.delete(uploaded.id)
        with pytest.raises(openai.NotFoundError):
            sdk.files.retrieve(uploaded.id)
        with pytest.raises(openai.NotFoundError):
            sdk.batches.create(input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h")
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=sim.base_url, api_key="sk-wrong", max_retries=0).files.list()
    assert uploaded.id.startswith("file-") and uploaded.object == "file"
    assert (uploaded.bytes, uploaded.filename, uploaded.purpose) == (len(content), "requests.jsonl", "batch")
    assert retrieved == uploaded and downloaded == content
    assert listed == [other.id, uploaded.id] and only_batch == [uploaded.id]
    assert deleted.deleted is True and deleted.id == uploaded.id


def test_the_endpoints_answer_knobs_apply_to_batch_lines() -> None:
    lines = [
        request_line("ungrounded", response_format=RESPONSE_FORMAT),
        request_line("broken", document=FILING + "\n[[sim:badjson]]", response_format=RESPONSE_FORMAT),
        request_line("too-long", max_tokens=5000),
    ]
    config = SimConfig(**QUICK, batch_duration_s=0.1, ungrounded_rate=1.0, context_tokens=4000)
    with SimServer(config) as sim:
        sdk = client(sim)
        batch, _ = wait(sdk, submit(sdk, lines))
        output = {line["custom_id"]: line for line in download(sdk, batch.output_file_id)}
        (refused,) = download(sdk, batch.error_file_id)
        invented = httpx.get(sim.base_url.replace("/v1", "/sim/invented")).json()["quotes"]
        stats = sim.stats()

    def content(custom_id: str) -> str:
        body = ChatCompletion.model_validate(output[custom_id]["response"]["body"])
        return body.choices[0].message.content or ""

    answer = FilingExtraction.model_validate_json(content("ungrounded"))
    quotes = [answer.revenue_quote, *(r.quote for r in answer.risk_factors)]
    assert all(q and q not in FILING for q in quotes) and sorted(invented) == sorted(quotes)
    assert stats["batch_ungrounded_quotes"] == stats["batch_quotes"] == len(quotes)
    assert stats["ungrounded_quotes"] == 0, "the synchronous endpoint's counter"
    with pytest.raises(ValueError):
        json.loads(content("broken"))
    assert refused["custom_id"] == "too-long" and refused["response"]["status_code"] == 400
    assert refused["response"]["body"]["error"]["code"] == "context_length_exceeded"
