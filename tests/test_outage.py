"""A provider's outage: the simulator's outage fault through the real openai SDK, then real workers
riding one out (every call refused for a while) behind the shared circuit breaker."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import openai
import pytest
import redis
from sqlalchemy import Engine, select

from pipeline.llm import circuit
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Document, LLMCall, Run
from pipeline_dev.bench.procs import sim_stats
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.synth_filings import write_filings
from tests.conftest import claimed_redis_db, eventually, run_cli, running_simulator, running_workers, stored

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

OUTAGE_WINDOW_S = 4.0
"""Long enough that three refused calls fit inside it on a loaded CI machine (at 1 s, a suite
running four workers on two cores once let the outage end before the third call)."""


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
        shown = post_outage(sim.base_url, {"seconds": OUTAGE_WINDOW_S, "kind": kind})
        assert shown["active"] and shown["kind"] == kind and 0 < shown["ends_in_s"] <= OUTAGE_WINDOW_S
        for _ in range(3):
            with pytest.raises(error) as refused:
                chat(sim)
            assert message in str(refused.value)
            if status is not None:
                assert isinstance(refused.value, openai.APIStatusError)
                assert refused.value.status_code == status
                assert not any(h.startswith("x-ratelimit") for h in refused.value.response.headers)
        eventually("the outage over", lambda: not sim.stats()["outage"]["active"], timeout_s=10)
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


# --- real workers through an outage --------------------------------------------------------

FULL_NIGHT = os.environ.get("PIPELINE_TEST_FULL_OUTAGE") == "1"
"""`PIPELINE_TEST_FULL_OUTAGE=1 pytest tests/test_outage.py -k real_workers -s` runs the issue's
night as it was seen: two workers of 8 threads, 40 filings, 5 minutes of 503s, the default probe
spacing (2 s doubling to 30 s) and lease. About 6 minutes: not in the suite."""
OUTAGE_S = 300.0 if FULL_NIGHT else 10.0
"""Scaled down from the issue's 5 minutes for the suite's time budget, with the probes' longest
spacing (PIPELINE_CIRCUIT_PROBE_MAX_S) scaled with it: 2, then every 3 s."""
PROBE_MAX_S = 30.0 if FULL_NIGHT else 3.0
PROBE_S = 2.0
"""The first probe's delay (PIPELINE_CIRCUIT_PROBE_S, its default): the probes are at least this
far apart."""
CIRCUIT_FAILURES = 5
"""PIPELINE_CIRCUIT_FAILURES (its default): the failures that open the circuit."""
LEASE_S = 30.0 if FULL_NIGHT else 3.0
FILINGS = 40 if FULL_NIGHT else 8
THREADS = 8 if FULL_NIGHT else 4
WORK_TIMEOUT_S = OUTAGE_S + 120.0


def _calls(engine: Engine, run_id: str) -> Counter[str]:
    with session_scope(engine) as session:
        return Counter(session.scalars(select(LLMCall.status).where(LLMCall.run_id == run_id)))


def _run(engine: Engine, run_id: str) -> Run:
    return stored(engine, Run, run_id)


def test_real_workers_ride_out_an_outage_without_failing_a_document_or_hammering_the_provider(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The issue's night, scaled down: two workers of four threads, a run of 8 filings under way,
    then every chat completion refused (503) for 10 s. The circuit opens after a handful of
    failures; the workers then send only its probes (one at a time, 2 s then every 3 s apart), their documents wait (in place, then deferred: no retry spent) and the run completes
    once the provider is back. What reached the provider while it was down is counted by the
    provider."""
    write_filings(tmp_path, FILINGS, seed=61, sizes=[40_000] * FILINGS)
    logs = tmp_path_factory.mktemp("outage")
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    sim_args = ("--p50", "0.3", "--p95", "0.6", "--record", str(logs / "requests.jsonl"))
    with claimed_redis_db(redis_base) as redis_url, running_simulator(logs, *sim_args) as sim:
        env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_BASE_URL": sim,
            "PIPELINE_LEASE_S": str(LEASE_S),
            "PIPELINE_CIRCUIT_PROBE_S": str(PROBE_S),
            "PIPELINE_CIRCUIT_PROBE_MAX_S": str(PROBE_MAX_S),
            "PIPELINE_CIRCUIT_FAILURES": str(CIRCUIT_FAILURES),
        }
        with running_workers(env, logs, count=2, concurrency=THREADS) as children:
            submitted = run_cli("submit", str(tmp_path), env=env)
            assert submitted.returncode == 0, submitted.stderr
            run_id = submitted.stdout.strip().splitlines()[-1]
            eventually("the run under way", lambda: _calls(engine, run_id)["ok"] >= 4, WORK_TIMEOUT_S)
            post_outage(sim, {"seconds": OUTAGE_S, "kind": "503"})
            assert _unfinished(engine, run_id), "the outage began mid-run"
            # While it lasts, the run holds: nothing fails, the circuit is open for every worker.
            shown = eventually("the circuit open", lambda: _open_circuit(redis_url, sim), timeout_s=OUTAGE_S)
            assert shown.state in ("open", "probing")
            eventually("the outage over", lambda: not sim_stats(sim)["outage"]["active"], OUTAGE_S + 10)
            status = eventually("the run ended", lambda: _ended(engine, run_id), WORK_TIMEOUT_S).status
            ended = time.time()
            assert all(child.problem() is None for child in children)
        stats = sim_stats(sim)
    (window,) = stats["outage"]["windows"]
    down_s = window["ends_at"] - window["started_at"]
    refused = window["refused"]
    calls = _calls(engine, run_id)
    with session_scope(engine) as session:
        docs = list(session.scalars(select(Document).where(Document.run_id == run_id)))
    assert status == "completed"
    assert [d.status for d in docs] == ["extracted"] * FILINGS
    assert [d.error for d in docs] == [None] * FILINGS, "no document spent a retry on the outage"
    # What the circuit lets through: the calls on their way when it opened (at most one per calling
    # thread: each worker's task threads and chunk threads), then one probe at a time, PROBE_S apart
    # at least. Without it, every held call would be sent and refused again and again.
    let_through = 4 * THREADS + 1 + down_s / PROBE_S
    assert refused <= let_through, f"{refused} requests in {down_s:.0f} s while the provider was down"
    after_return_s = ended - window["ends_at"]
    assert after_return_s < 60, f"the run completed {after_return_s:.0f} s after the provider's return"
    assert calls["unavailable"] == refused, "every refused request is a recorded call"
    assert calls["circuit_open"] > 0, "the held calls are recorded as such"
    recorded = [json.loads(line)["status"] for line in (logs / "requests.jsonl").read_text().splitlines()]
    assert recorded.count("outage-503") == refused, "the provider's own record agrees"
    print(
        f"outage {down_s:.0f} s: {refused} requests reached the provider ({refused / down_s:.2f}/s), "
        f"{calls['circuit_open']} calls held; the run completed {after_return_s:.1f} s after its return; "
        f"calls {dict(calls)}"
    )


def _unfinished(engine: Engine, run_id: str) -> int:
    with session_scope(engine) as session:
        statuses = session.scalars(select(Document.status).where(Document.run_id == run_id))
        return sum(status not in ("extracted", "failed") for status in statuses)


def _ended(engine: Engine, run_id: str) -> Run | None:
    run = _run(engine, run_id)
    return run if run.status in ("completed", "failed") else None


def _open_circuit(redis_url: str, endpoint: str) -> circuit.CircuitState | None:
    client = redis.Redis.from_url(redis_url)
    try:
        shown = circuit.state(client, endpoint)
    finally:
        client.close()
    return shown if shown.state != "closed" else None
