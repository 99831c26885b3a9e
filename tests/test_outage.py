"""A provider's outage: the simulator's outage fault through the real openai SDK, then real workers
riding one out (every call refused for a while) behind the shared circuit breaker."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from pipeline_dev.sim import SimConfig, SimServer
from tests.conftest import running_simulator

MESSAGES: Any = [{"role": "user", "content": "Hello there. How are you?"}]


def post_outage(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST /sim/outage to the simulator at `base_url` (its /v1 URL)."""
    request = urllib.request.Request(
        base_url.removesuffix("/v1") + "/sim/outage",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as answer:
        return dict(json.load(answer))


def chat(sim: SimServer | str) -> Any:
    url = sim if isinstance(sim, str) else sim.base_url
    client = openai.OpenAI(base_url=url, api_key="sk-test", max_retries=0, timeout=5)
    return client.chat.completions.create(model="sim-1", messages=MESSAGES, max_tokens=10)


# --- the simulator's outage ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "error", "status", "message"),
    [
        (
            "503",
            openai.InternalServerError,
            503,
            "The engine is currently overloaded, please try again later.",
        ),
        ("500", openai.InternalServerError, 500, "The server had an error while processing your request."),
        ("reset", openai.APIConnectionError, None, "Connection error."),
    ],
)
def test_an_outage_refuses_every_chat_completion_as_a_provider_does_and_ends_by_itself(
    kind: str, error: type[openai.APIError], status: int | None, message: str
) -> None:
    with SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        assert chat(sim).choices[0].message.content
        shown = post_outage(sim.base_url, {"seconds": 1.0, "kind": kind})
        assert shown["active"] and shown["kind"] == kind and 0 < shown["ends_in_s"] <= 1.0
        for _ in range(3):
            with pytest.raises(error) as refused:
                chat(sim)
            assert message in str(refused.value)
            if status is not None:
                assert isinstance(refused.value, openai.APIStatusError)
                assert refused.value.status_code == status
                assert not any(h.startswith("x-ratelimit") for h in refused.value.response.headers)
        deadline = time.monotonic() + 10
        while sim.stats()["outage"]["active"]:
            assert time.monotonic() < deadline, "the outage never ended"
            time.sleep(0.05)
        assert chat(sim).choices[0].message.content
        stats = sim.stats()
    (window,) = stats["outage"]["windows"]
    assert window["refused"] == len(window["refused_at"]) == stats["outage_refused"] == 3
    assert window["kind"] == kind and window["ended"]
    assert all(window["started_at"] <= t < window["ends_at"] for t in window["refused_at"])
    assert stats["requests_total"] == 5 and stats["admitted"] == 2


def test_an_outage_from_the_command_line_is_recorded_and_one_ended_early_is_over(tmp_path: Path) -> None:
    record = tmp_path / "requests.jsonl"
    args = ["--p50", "0", "--outage-after", "0", "--outage-for", "600", "--record", str(record)]
    with running_simulator(tmp_path, *args) as url:
        with pytest.raises(openai.InternalServerError):
            chat(url)
        assert post_outage(url, {"seconds": 0})["active"] is False
        assert chat(url).choices[0].message.content
        with pytest.raises(urllib.error.HTTPError) as bad:
            post_outage(url, {"seconds": 5, "kind": "502"})
        assert bad.value.code == 400
    statuses = [json.loads(line)["status"] for line in record.read_text().splitlines()]
    assert statuses == ["outage-503", 200]
    with pytest.raises(ValueError, match="outage kind"):
        SimConfig(outage_kind="502")
