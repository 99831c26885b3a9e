"""pipeline.sim: pure answer/limit/fault tests, then the server through the real openai SDK."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.extraction.schemas import FilingExtraction
from pipeline_dev.sim import SimConfig, SimServer, build_app
from pipeline_dev.sim.answers import build_json_answer
from pipeline_dev.sim.faults import draw, latency
from pipeline_dev.sim.limits import PerSecondQuota, SlidingWindowLimiter, openai_duration
from pipeline_dev.sim.replies import build_text_answer, malformed_json, violate_schema
from pipeline_dev.sim.request import document_text

SCHEMA = FilingExtraction.model_json_schema()
RESPONSE_FORMAT: Any = {
    "type": "json_schema",
    "json_schema": {"name": "FilingExtraction", "schema": SCHEMA, "strict": True},
}
FILING = """UNITED STATES SECURITIES AND EXCHANGE COMMISSION
FORM 10-K
ANNUAL REPORT PURSUANT TO SECTION 13 OR 15(d) OF THE SECURITIES EXCHANGE ACT OF 1934
For the fiscal year ended December 31, 2025
COMPANY CONFORMED NAME: Northwind Robotics Inc.

Item 1. Business
Northwind Robotics designs warehouse robots. We had approximately 1,200 employees at year end.

Item 1A. Risk Factors
Supply chain concentration. We depend on a small number of suppliers for precision actuators, and a disruption could adversely affect our ability to ship products.

Cybersecurity
A breach of our systems could harm our reputation and results of operations, and we
may incur significant costs to remediate it.

Item 7. Management's Discussion and Analysis of Financial Condition and Results of Operations
Total revenue for fiscal 2025 was $1,234.5 million, an increase of 12% compared with fiscal 2024.
"""
FAST = SimConfig(p50_s=0.002, p95_s=0.005, seed=7)


def messages(document: str, extra: str = "") -> list[Any]:
    user = f"Extract the facts. {extra}\n<document>\n{document}\n</document>"
    return [
        {"role": "system", "content": "You extract facts from filings. Answer in JSON."},
        {"role": "user", "content": user},
    ]


def client(sim: SimServer, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0, **kwargs)


def extract(sim: SimServer, document: str = FILING, **kwargs: Any) -> Any:
    return client(sim).chat.completions.create(
        model="sim-1", messages=messages(document), response_format=RESPONSE_FORMAT, **kwargs
    )


# --- pure: answers ---------------------------------------------------------------------------


def test_json_answer_reads_the_filing() -> None:
    answer = FilingExtraction.model_validate(build_json_answer(SCHEMA, FILING))
    assert answer.company == "Northwind Robotics Inc."
    assert answer.fiscal_year == 2025
    assert answer.revenue_usd == 1_234_500_000.0
    assert answer.revenue_quote is not None and "$1,234.5 million" in answer.revenue_quote
    assert [r.title for r in answer.risk_factors] == ["Supply chain concentration", "Cybersecurity"]
    for quote in [answer.revenue_quote, *(r.quote for r in answer.risk_factors)]:
        assert quote in FILING and quote == quote.strip()
    assert build_json_answer(SCHEMA, FILING) == build_json_answer(SCHEMA, FILING)


def test_only_the_document_is_a_source() -> None:
    msgs = messages(
        "A short note with nothing to extract.",
        extra="COMPANY CONFORMED NAME: Evil Corp. Total revenue was $9 billion. Risks could harm.",
    )
    doc = document_text(msgs)
    assert "Evil" not in doc
    answer = FilingExtraction.model_validate(build_json_answer(SCHEMA, doc))
    assert answer.company is None and answer.revenue_usd is None and answer.fiscal_year is None
    assert answer.revenue_quote is None and answer.risk_factors == []


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.skipif(not (EXAMPLES / "truth.json").exists(), reason="no example filings")
def test_example_filings_match_their_truth() -> None:
    truths = json.loads((EXAMPLES / "truth.json").read_text())["filings"]
    checked = 0
    for truth in truths:
        path = EXAMPLES / "filings" / truth["filename"]
        if not path.exists() or path.stat().st_size > 100_000:  # the big ones cost seconds
            continue
        text = path.read_text()
        answer = FilingExtraction.model_validate(build_json_answer(SCHEMA, text))
        assert (answer.company, answer.fiscal_year, answer.revenue_usd) == (
            truth["company"],
            truth["fiscal_year"],
            truth["revenue_usd"],
        )
        assert all(r.title in truth["risk_factor_titles"] and r.quote in text for r in answer.risk_factors)
        checked += 1
    assert checked


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("Total revenue was $2.5 billion in fiscal 2024.", 2.5e9),
        ("Net sales were $750 thousand.", 750_000.0),
        ("Revenues for the year were $12,345.", 12_345.0),
        ("Total revenue for fiscal 2025 was $1,234.7 million.", 1_234_700_000.0),
    ],
)
def test_money_units(sentence: str, expected: float) -> None:
    answer = build_json_answer(SCHEMA, f"Item 7. Results\n{sentence}\n")
    assert answer["revenue_usd"] == expected
    assert answer["revenue_quote"] == sentence


class Officer(BaseModel):
    name: str
    role: Literal["ceo", "cfo", "other"]
    risk_related: bool


class Wide(BaseModel):
    model_config = ConfigDict(extra="forbid")
    registrant_name: str
    employees: int | None
    margin_percent: float | None
    officers: list[Officer]
    risk_factors: list[str]
    headquarters_city: str | None


def test_schema_features_validate() -> None:
    doc = FILING + "\nREGISTRANT NAME: Northwind\nGross margin was 41.5% in fiscal 2025.\n"
    answer = Wide.model_validate(build_json_answer(Wide.model_json_schema(), doc))
    assert answer.registrant_name == "Northwind"
    assert answer.employees == 1200
    assert answer.margin_percent == 41.5
    assert answer.headquarters_city is None
    assert all(quote in doc for quote in answer.risk_factors) and answer.risk_factors


def test_text_answer_is_short_and_from_the_prompt() -> None:
    text = build_text_answer(FILING, max_chars=400)
    assert len(text) <= 400
    assert "Northwind Robotics Inc." in text
    assert 2 <= text.count(". ") + 1 <= 6
    summaries = json.dumps(build_json_answer(SCHEMA, FILING))
    assert "Northwind Robotics Inc." in build_text_answer(summaries)


def test_broken_answers_are_broken() -> None:
    valid = build_json_answer(SCHEMA, FILING)
    with pytest.raises(ValidationError):
        FilingExtraction.model_validate(violate_schema(valid, SCHEMA))
    with pytest.raises(ValueError):
        json.loads(malformed_json(json.dumps(valid)))


# --- pure: limits and faults ------------------------------------------------------------------


def test_sliding_window_rpm() -> None:
    limiter = SlidingWindowLimiter(rpm=3, tpm=0, quantize=False)
    assert [limiter.check(t, 10).admitted for t in (0.0, 1.0, 2.0, 3.0)] == [True, True, True, False]
    refused = limiter.check(30.0, 10)
    assert not refused.admitted and refused.retry_after_s == pytest.approx(30.0)
    assert limiter.check(60.0, 10).admitted  # the request at t=0 has left the window
    assert limiter.max_requests_in_window == 3


def test_sliding_window_tpm() -> None:
    limiter = SlidingWindowLimiter(rpm=0, tpm=100, quantize=False)
    assert limiter.check(0.0, 60).admitted
    refused = limiter.check(10.0, 60)
    assert not refused.admitted and refused.retry_after_s == pytest.approx(50.0)
    assert limiter.check(10.0, 40).remaining_tokens == 0
    assert limiter.check(0.0, 101).too_large
    assert limiter.max_tokens_in_window == 100


def test_headers_say_when_the_quota_is_whole_again_as_openai_writes_it() -> None:
    limiter = SlidingWindowLimiter(rpm=60, tpm=150_000, quantize=False)
    decision = limiter.check(0.0, 16)
    # OpenAI's own example: 59 of 60 requests remaining, reset in 1s.
    assert (decision.remaining_requests, openai_duration(decision.reset_requests_s)) == (59, "1s")
    assert (decision.remaining_tokens, openai_duration(decision.reset_tokens_s)) == (149_984, "7ms")


def test_the_quantum_holds_a_second_to_its_share_of_the_minute() -> None:
    quantum = PerSecondQuota(rpm=180, tpm=6_000, window_s=60.0)  # 3 requests, 100 tokens a second
    assert quantum.wait_s(60) == 0.0
    quantum.count(60, admitted=True)
    assert quantum.wait_s(70) == 0.0, "the second's share is not spent yet: this one may overshoot it"
    quantum.count(70, admitted=True)
    assert 0 < quantum.wait_s(1) <= 1.0, "130 tokens: the second's 100 are spent"
    quantum.reset()
    quantum.count(1, admitted=True)
    quantum.count(1, admitted=False)  # a refused request still counts as a request
    quantum.count(1, admitted=True)
    assert 0 < quantum.wait_s(1) <= 1.0, "three requests already this second"


def test_openai_durations() -> None:
    assert [openai_duration(s) for s in (0, 0.25, 1, 1.2, 90, 360)] == [
        "0s",
        "250ms",
        "1s",
        "1.2s",
        "1m30s",
        "6m0s",
    ]


def test_fault_draws_are_seeded_and_shared() -> None:
    import random

    config = SimConfig(error_rate=0.2, drop_rate=0.1, hang_rate=0.1, bad_json_rate=0.5, seed=3)
    first = [draw(random.Random(3), config) for _ in range(1)]
    assert first == [draw(random.Random(3), config)]
    rng = random.Random(3)
    outcomes = [draw(rng, config).outcome for _ in range(4000)]
    assert 0.15 < outcomes.count("error") / 4000 < 0.25
    assert 0.06 < outcomes.count("drop") / 4000 < 0.14
    samples = sorted(latency(rng, 0.05, 0.2) for _ in range(4000))
    assert 0.04 < samples[2000] < 0.06 and 0.15 < samples[3800] < 0.26


def _quotes(answer: FilingExtraction) -> list[str]:
    return [q for q in [answer.revenue_quote, *(r.quote for r in answer.risk_factors)] if q]


def test_ungrounded_quotes_are_not_in_the_document_and_seeded() -> None:
    from pipeline_dev.sim.ungrounded import replace_quotes

    flat = " ".join(FILING.lower().split())
    invented_all: list[str] = []
    seen = 0
    for seed in range(40):
        instance, invented = replace_quotes(build_json_answer(SCHEMA, FILING), FILING, 0.2, seed)
        again, _ = replace_quotes(build_json_answer(SCHEMA, FILING), FILING, 0.2, seed)
        assert instance == again, "the same seed replaces the same quotes the same way"
        answer = FilingExtraction.model_validate(instance)
        for quote in _quotes(answer):
            assert (quote in invented.quotes) == (" ".join(quote.lower().split()) not in flat)
        seen += invented.quotes_seen
        invented_all += invented.quotes
    assert seen == 40 * 3
    assert 0.1 < len(invented_all) / seen < 0.3, "about the configured share"
    untouched, none = replace_quotes(build_json_answer(SCHEMA, FILING), FILING, 0.0, 1)
    assert untouched == build_json_answer(SCHEMA, FILING) and none.quotes == []


# --- server -----------------------------------------------------------------------------------


def test_ungrounded_quotes_through_the_sdk_are_counted_and_listed() -> None:
    with SimServer(SimConfig(p50_s=0.002, p95_s=0.005, seed=7, ungrounded_rate=1.0)) as sim:
        completion = extract(sim)
        stats = sim.stats()
        listed = httpx.get(sim.base_url.replace("/v1", "/sim/invented")).json()["quotes"]
    answer = FilingExtraction.model_validate_json(completion.choices[0].message.content or "")
    quotes = _quotes(answer)
    assert len(quotes) == 3 and all(q not in FILING for q in quotes)
    assert answer.revenue_usd == 1_234_500_000.0, "only quotes change, not the figures"
    assert stats["quotes"] == stats["ungrounded_quotes"] == 3 and stats["ungrounded_rate"] == 1.0
    assert sorted(listed) == sorted(quotes)


def test_json_schema_answer_through_the_sdk() -> None:
    with SimServer(FAST) as sim:
        raw = client(sim).chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=messages(FILING), response_format=RESPONSE_FORMAT
        )
        completion = raw.parse()
        stats = sim.stats()
    answer = FilingExtraction.model_validate_json(completion.choices[0].message.content or "")
    assert answer.company == "Northwind Robotics Inc." and answer.fiscal_year == 2025
    assert answer.revenue_usd == 1_234_500_000.0
    assert all(r.quote in FILING for r in answer.risk_factors)
    assert completion.choices[0].finish_reason == "stop" and completion.model == "gpt-4o-mini"
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert stats["admitted"] == 1 and stats["completion_tokens"] == completion.usage.completion_tokens


def test_text_answer_and_max_tokens() -> None:
    with SimServer(FAST) as sim:
        sdk = client(sim)
        full = sdk.chat.completions.create(model="sim-1", messages=messages(FILING), max_tokens=300)
        cut = sdk.chat.completions.create(model="sim-1", messages=messages(FILING), max_tokens=5)
        listed = [m.id for m in sdk.models.list()]
    assert full.choices[0].finish_reason == "stop"
    assert "Northwind Robotics Inc." in (full.choices[0].message.content or "")
    assert cut.choices[0].finish_reason == "length" and len(cut.choices[0].message.content or "") <= 20
    assert "sim-1" in listed


def test_rpm_limit_answers_429_with_retry_after() -> None:
    with SimServer(SimConfig(p50_s=0, rpm=5, seed=1, quantize=False)) as sim:
        sdk = client(sim)
        ok = sdk.chat.completions.with_raw_response.create(model="sim-1", messages=messages("Hi."))
        assert ok.headers["x-ratelimit-limit-requests"] == "5"
        assert ok.headers["x-ratelimit-remaining-requests"] == "4"
        for _ in range(4):
            sdk.chat.completions.create(model="sim-1", messages=messages("Hi."))
        with pytest.raises(openai.RateLimitError) as refused:
            sdk.chat.completions.create(model="sim-1", messages=messages("Hi."))
        stats = sim.stats()
    headers = refused.value.response.headers
    assert 55 <= int(headers["retry-after"]) <= 60 and int(headers["retry-after-ms"]) > 50_000
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"].endswith("s")
    assert refused.value.code == "rate_limit_exceeded"
    assert stats["rejected_429"] == 1 and stats["max_admitted_in_any_60s_window"] == 5
    # Second by second, what the provider saw: five admitted (with their tokens), one refused.
    timeline = stats["timeline"]
    assert [sum(s[0] for s in timeline), sum(s[2] for s in timeline)] == [5, 1]
    assert sum(s[1] for s in timeline) == stats["charged_tokens"] > 0


def test_tpm_limit_counts_prompt_and_max_tokens() -> None:
    with SimServer(SimConfig(p50_s=0, tpm=1000)) as sim:
        sdk = client(sim)
        sdk.chat.completions.create(model="sim-1", messages=messages("Hi."), max_tokens=600)
        with pytest.raises(openai.RateLimitError):
            sdk.chat.completions.create(model="sim-1", messages=messages("Hi."), max_tokens=600)
        assert sim.stats()["max_tokens_in_any_60s_window"] <= 1000


@pytest.mark.parametrize(
    ("config", "error"),
    [
        (SimConfig(p50_s=0, error_rate=1.0), openai.InternalServerError),
        (SimConfig(p50_s=0, drop_rate=1.0), openai.APIConnectionError),
        (SimConfig(p50_s=0, hang_rate=1.0), openai.APITimeoutError),
    ],
)
def test_faults_reach_the_sdk(config: SimConfig, error: type[Exception]) -> None:
    with SimServer(config) as sim:
        with pytest.raises(error):
            client(sim, timeout=0.5).chat.completions.create(model="sim-1", messages=messages("Hi."))
        stats = sim.stats()
    assert stats["errors_5xx"] + stats["dropped"] + stats["hung"] == 1 and stats["admitted"] == 0


def test_bad_json_and_truncation() -> None:
    with SimServer(SimConfig(p50_s=0, bad_json_rate=1.0)) as sim:
        bad = extract(sim).choices[0]
        assert sim.stats()["bad_json"] == 1
    with pytest.raises(ValueError):
        json.loads(bad.message.content or "")
    with SimServer(SimConfig(p50_s=0, truncate_rate=1.0)) as sim:
        cut = extract(sim).choices[0]
    assert cut.finish_reason == "length"
    with pytest.raises(ValueError):
        json.loads(cut.message.content or "")


def test_content_hooks() -> None:
    with SimServer(FAST) as sim:
        sdk = client(sim)
        invalid = sdk.chat.completions.create(
            model="sim-1",
            messages=messages(FILING + "\n[[sim:invalid]]"),
            response_format=RESPONSE_FORMAT,
        )
        content = invalid.choices[0].message.content or ""
        json.loads(content)
        with pytest.raises(ValidationError):
            FilingExtraction.model_validate_json(content)
        bad = extract(sim, FILING + "\n[[sim:badjson]]").choices[0].message.content or ""
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(openai.InternalServerError):
            extract(sim, FILING + " [[sim:error]]")
        FilingExtraction.model_validate_json(extract(sim).choices[0].message.content or "")


def test_http_errors_are_openai_shaped() -> None:
    with SimServer(FAST) as sim:
        root = sim.base_url.removesuffix("/v1")
        missing = httpx.get(f"{root}/nope")
        garbled = httpx.post(f"{sim.base_url}/chat/completions", content=b"{not json")
        no_messages = httpx.post(f"{sim.base_url}/chat/completions", json={"model": "m"})
        streaming = httpx.post(
            f"{sim.base_url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True},
        )
        reset = httpx.post(f"{root}/sim/reset")
    assert missing.status_code == 404 and "error" in missing.json()
    for response in (garbled, no_messages, streaming):
        assert response.status_code == 400
        assert response.json()["error"]["type"] == "invalid_request_error"
    assert reset.json()["requests_total"] == 0


def test_many_concurrent_requests_are_answered_side_by_side() -> None:
    """200 requests at once are all answered, many of them in flight together (not one by one):
    counted by the simulator, not timed, so a slow machine does not fail it."""

    async def run(base_url: str) -> None:
        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)

        async def one(i: int) -> None:
            done = await sdk.chat.completions.create(
                model="sim-1", messages=messages(f"Acme Corp filing number {i}."), max_tokens=100
            )
            assert done.choices[0].message.content

        try:
            await asyncio.gather(*(one(i) for i in range(200)))
        finally:
            await sdk.close()

    # Latencies of about a second: sending 200 requests takes far less, on any machine.
    with SimServer(SimConfig(p50_s=1.0, p95_s=1.5, seed=11)) as sim:
        asyncio.run(run(sim.base_url))
        stats = sim.stats()
    assert stats["admitted"] == 200 and stats["in_flight"] == 0
    assert stats["most_in_flight"] >= 50, stats["most_in_flight"]


async def _burst(base_url: str, calls: int = 40) -> list[Any]:
    """`calls` requests at once; each result is an answer or the SDK's exception."""
    sdk = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    try:
        sent = (sdk.chat.completions.create(model="sim-1", messages=messages("Hi.")) for _ in range(calls))
        return await asyncio.gather(*sent, return_exceptions=True)
    finally:
        await sdk.close()


def test_rpm_holds_under_a_concurrent_burst() -> None:
    with SimServer(SimConfig(p50_s=0.01, p95_s=0.05, rpm=10, quantize=False)) as sim:
        results = asyncio.run(_burst(sim.base_url))
        stats = sim.stats()
    refused = [r for r in results if isinstance(r, openai.RateLimitError)]
    assert len(refused) == 30 and len(results) - len(refused) == 10
    assert stats["max_admitted_in_any_60s_window"] == 10 and stats["rejected_429"] == 30


def test_by_default_a_minutes_quota_is_also_enforced_per_second() -> None:
    """OpenAI: 60,000 requests/minute may be enforced as 1,000 requests/second."""

    with SimServer(SimConfig(p50_s=0.01, p95_s=0.05, rpm=600)) as sim:
        results = asyncio.run(_burst(sim.base_url))
        stats = sim.stats()
    refused = [r for r in results if isinstance(r, openai.RateLimitError)]
    # The minute has room for all 40 at once; the second, for 10 (a slow machine: a few more).
    assert 10 <= len(results) - len(refused) <= 20
    assert stats["rejected_per_second"] == stats["rejected_429"] == len(refused)
    refusal = refused[0].response.headers
    assert int(refusal["retry-after-ms"]) <= 1000 and refusal["x-ratelimit-limit-requests"] == "600"


def test_record_file(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    with SimServer(SimConfig(p50_s=0, record_path=str(path))) as sim:
        extract(sim)
    (line,) = path.read_text().splitlines()
    entry = json.loads(line)
    assert entry["status"] == 200 and entry["response_format_type"] == "json_schema"
    assert entry["model"] == "sim-1" and entry["messages"][1]["role"] == "user"


def test_serve_prints_its_address() -> None:
    code = "from pipeline_dev.sim import SimConfig, serve; serve('127.0.0.1', 0, SimConfig(p50_s=0))"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("pipeline-sim listening on http://127.0.0.1:") and line.endswith("/v1")
        url = line.rsplit(" ", 1)[1]
        assert httpx.get(f"{url}/models").status_code == 200
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0


def test_build_app_is_an_aiohttp_app() -> None:
    from aiohttp import web

    assert isinstance(build_app(SimConfig()), web.Application)


# --- flex processing (OpenAI's flex guide) --------------------------------------------------


def test_a_flex_request_is_answered_as_flex_and_a_bad_tier_is_refused() -> None:
    with SimServer(FAST) as sim:
        flex = extract(sim, service_tier="flex")
        standard = extract(sim)
        with pytest.raises(openai.BadRequestError, match="service_tier"):
            extract(sim, service_tier="cheapest")  # type: ignore[arg-type]
        stats = sim.stats()
    assert flex.service_tier == "flex" and standard.service_tier == "default"
    assert stats["flex_requests"] == 1 and stats["flex_unavailable"] == 0


def test_flex_without_capacity_is_a_429_resource_unavailable_that_charges_no_quota() -> None:
    config = SimConfig(p50_s=0.002, p95_s=0.005, seed=7, rpm=5, flex_unavailable_rate=1.0)
    with SimServer(config) as sim:
        for _ in range(10):  # twice the minute's requests: none counts against it
            with pytest.raises(openai.RateLimitError) as refused:
                extract(sim, service_tier="flex")
        standard = client(sim).chat.completions.with_raw_response.create(
            model="sim-1", messages=messages(FILING), response_format=RESPONSE_FORMAT
        )
        stats = sim.stats()
    assert refused.value.status_code == 429 and refused.value.code == "resource_unavailable"
    assert "Resource Unavailable" in refused.value.message
    assert stats["flex_unavailable"] == 10 and stats["admitted"] == 1
    assert standard.headers["x-ratelimit-remaining-requests"] == "4", "the refused flex calls took no quota"


def test_flex_answers_slower_than_the_standard_tier_by_its_setting() -> None:
    """A constant drawn latency: flex waits `flex_slowdown` times as long (a lower bound, which
    no load on the machine can break)."""
    config = SimConfig(p50_s=0.05, p95_s=0.05, seed=7, flex_slowdown=4.0)
    with SimServer(config) as sim, httpx.Client(timeout=30) as http:
        body = {"model": "sim-1", "messages": messages(FILING), "response_format": RESPONSE_FORMAT}
        asked = http.post(
            sim.base_url + "/chat/completions",
            json={**body, "service_tier": "flex"},
            headers={"Authorization": "Bearer sk-test"},
        )
    assert asked.status_code == 200 and asked.json()["service_tier"] == "flex"
    assert asked.elapsed.total_seconds() >= 4 * 0.05
