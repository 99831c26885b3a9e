"""The simulator's prompt caching (OpenAI's prompt-caching guide) and its own bill: the pure rules
with the clock set, then through the real openai SDK on the chat endpoint and in a batch."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.sim.bill import Bill, parse_prices
from pipeline_dev.sim.prompt_cache import BLOCK_CHARS, MIN_CACHED_TOKENS, STEP_TOKENS, PromptCache
from pipeline_dev.sim.request import CHARS_PER_TOKEN, estimate_tokens, parse
from tests.test_sim import RESPONSE_FORMAT, messages
from tests.test_sim_batches import QUICK, download, request_line, submit, wait

PREFIX = "".join(f"Instruction {i}: read the filing and quote it exactly. " for i in range(200))
"""About 2,300 tokens said the same way in every request."""


def tokens_of(chars: int) -> int:
    return chars // CHARS_PER_TOKEN


# --- pure: the rules ------------------------------------------------------------------------


def test_a_prompt_under_1024_tokens_is_neither_cached_nor_served() -> None:
    cache = PromptCache()
    short = "x" * (MIN_CACHED_TOKENS * CHARS_PER_TOKEN - 8)
    assert cache.serve("m", "", short, now=0.0) == 0
    assert cache.serve("m", "", short, now=1.0) == 0
    assert len(cache) == 0


def test_the_longest_prefix_seen_is_served_in_steps_of_128_tokens_from_1024() -> None:
    cache = PromptCache()
    first = PREFIX + "the first chunk"
    assert cache.serve("m", "", first, now=0.0) == 0, "nothing seen before"
    shared = len(PREFIX)
    served = cache.serve("m", "", PREFIX + "another chunk, longer than the first one", now=1.0)
    assert served == (tokens_of(shared) // STEP_TOKENS) * STEP_TOKENS
    assert served % STEP_TOKENS == 0 and served >= MIN_CACHED_TOKENS
    assert served <= estimate_tokens(PREFIX)


def test_a_repeated_prompt_is_served_whole_but_its_last_partial_step() -> None:
    cache = PromptCache()
    prompt = "y" * (BLOCK_CHARS * 9 + 100)
    cache.serve("m", "", prompt, now=0.0)
    assert cache.serve("m", "", prompt, now=1.0) == 9 * STEP_TOKENS


def test_a_shared_prefix_under_1024_tokens_is_a_miss() -> None:
    cache = PromptCache()
    common = "z" * (BLOCK_CHARS * 7 + 10)  # 7 steps: 896 tokens in common
    cache.serve("m", "", common + "a" * 4000, now=0.0)
    assert cache.serve("m", "", common + "b" * 4000, now=1.0) == 0


def test_a_prefix_expires_after_its_ttl_of_inactivity_and_a_hit_keeps_it() -> None:
    cache = PromptCache(ttl_s=300.0)
    cache.serve("m", "", PREFIX + "1", now=0.0)
    assert cache.serve("m", "", PREFIX + "2", now=299.0) > 0, "used within the TTL"
    assert cache.serve("m", "", PREFIX + "3", now=598.0) > 0, "the hit at 299 s counted as use"
    assert cache.serve("m", "", PREFIX + "4", now=898.5) == 0, "five minutes and more unused"
    assert cache.serve("m", "", PREFIX + "5", now=899.0) > 0, "the miss cached it again"


def test_another_model_or_another_schema_is_another_cache() -> None:
    cache = PromptCache()
    cache.serve("gpt-4o-mini", "schema-a", PREFIX + "1", now=0.0)
    assert cache.serve("gpt-4o", "schema-a", PREFIX + "2", now=1.0) == 0
    assert cache.serve("gpt-4o-mini", "schema-b", PREFIX + "3", now=2.0) == 0
    assert cache.serve("gpt-4o-mini", "schema-a", PREFIX + "4", now=3.0) > 0


def test_a_ttl_of_zero_caches_nothing() -> None:
    cache = PromptCache(ttl_s=0.0)
    cache.serve("m", "", PREFIX, now=0.0)
    assert cache.serve("m", "", PREFIX, now=0.0) == 0


def test_the_least_recently_used_blocks_go_first_and_a_prefix_stays_whole() -> None:
    cache = PromptCache(max_blocks=12)
    old = "o" * (BLOCK_CHARS * 10)
    cache.serve("m", "", old, now=0.0)
    cache.serve("m", "", "n" * (BLOCK_CHARS * 10), now=1.0)  # 20 blocks: 8 of the old dropped
    assert len(cache) == 12
    assert cache.serve("m", "", old, now=2.0) == 0, "the old prompt's tail blocks went first, then its head"


def test_the_bill_prices_cached_tokens_and_halves_flex_and_batch() -> None:
    bill = Bill()
    bill.add("m", "default", 2_000_000, 1_000_000, 1_000_000)
    bill.add("m", "flex", 1_000_000, 0, 0)
    bill.add("m", "batch", 0, 0, 1_000_000)
    bill.add("unpriced", "default", 10, 0, 10)
    invoice = bill.invoice("m:1.0/4.0/0.25")
    # default: 1 M fresh x 1 + 1 M cached x 0.25 + 1 M out x 4; flex: 1 M x 1 x 0.5; batch: 4 x 0.5
    assert invoice["usd"] == pytest.approx(5.25 + 0.5 + 2.0)
    assert invoice["unpriced_models"] == ["unpriced"]
    assert parse_prices("m:1/2")["m"].cached == 1.0, "no cached price: the input price"
    with pytest.raises(ValueError, match="model:input/output"):
        parse_prices("m:1/2/3/4")


# --- through the SDK --------------------------------------------------------------------------


def client(sim: SimServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url, api_key="sk-test", max_retries=0)


def ask(sdk: openai.OpenAI, chunk: str, **kwargs: Any) -> Any:
    return sdk.chat.completions.create(
        model="sim-1", messages=messages(chunk, extra=PREFIX), response_format=RESPONSE_FORMAT, **kwargs
    )


def test_answers_report_cached_tokens_and_the_bill_prices_them() -> None:
    config = SimConfig(p50_s=0, p95_s=0, seed=3, prices="sim-1:1000/2000/250")
    with SimServer(config) as sim:
        sdk = client(sim)
        first = ask(sdk, "Revenue was $5 million.")
        second = ask(sdk, "Revenue was $6 million.", service_tier="flex")
        with httpx.Client() as http:
            invoice = http.get(sim.base_url.removesuffix("/v1") + "/sim/bill").json()
        stats = sim.stats()
    assert first.usage is not None and second.usage is not None
    assert first.usage.prompt_tokens_details is not None and second.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached is not None and cached >= MIN_CACHED_TOKENS and cached % STEP_TOKENS == 0
    assert stats["cached_tokens"] == cached
    expected = (first.usage.prompt_tokens * 1000 + first.usage.completion_tokens * 2000) / 1e6 + 0.5 * (
        (second.usage.prompt_tokens - cached) * 1000 + cached * 250 + second.usage.completion_tokens * 2000
    ) / 1e6
    assert invoice["usd"] == pytest.approx(expected)
    assert {(line["tier"], line["cached_tokens"]) for line in invoice["lines"]} == {
        ("default", 0),
        ("flex", cached),
    }


def test_batch_output_lines_and_the_batch_report_cached_tokens() -> None:
    lines = [
        request_line(f"chunk-{i}", response_format=RESPONSE_FORMAT, messages=messages(f"Chunk {i}.", PREFIX))
        for i in range(4)
    ]
    config = SimConfig(**QUICK, batch_duration_s=0.1, prices="sim-1:1000/2000/250")
    with SimServer(config) as sim:
        sdk = client(sim)
        batch, _ = wait(sdk, submit(sdk, lines))
        output = download(sdk, batch.output_file_id)
        stats = sim.stats()
    cached = [line["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"] for line in output]
    assert (
        len(output) == 4
        and sorted(cached)[0] == 0
        and all(c >= MIN_CACHED_TOKENS for c in sorted(cached)[1:])
    )
    assert batch.usage is not None and batch.usage.input_tokens_details.cached_tokens == sum(cached)
    assert stats["batch_cached_tokens"] == sum(cached)


def test_prompt_cache_key_is_accepted_or_refused_as_configured() -> None:
    with SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        answered = ask(client(sim), "A chunk.", extra_body={"prompt_cache_key": "filing-1"})
        assert answered.choices[0].message.content
        with pytest.raises(openai.BadRequestError, match="prompt_cache_key"):
            ask(client(sim), "A chunk.", extra_body={"prompt_cache_key": 7})
    with SimServer(SimConfig(p50_s=0, p95_s=0, reject_prompt_cache_key=True)) as sim:
        with pytest.raises(
            openai.BadRequestError, match="Unrecognized request argument supplied: prompt_cache_key"
        ):
            ask(client(sim), "A chunk.", extra_body={"prompt_cache_key": "filing-1"})
        assert ask(client(sim), "A chunk.").choices, "without the key: answered"


# --- the structured output's schema: counted, and first in the cached prefix ------------------

LONG_FORMAT: Any = {
    "type": "json_schema",
    "json_schema": {
        **RESPONSE_FORMAT["json_schema"],
        "schema": {**RESPONSE_FORMAT["json_schema"]["schema"], "description": PREFIX},
    },
}
"""A json_schema response_format of about 2,400 tokens, for messages of a few dozen."""


def test_a_json_schema_counts_in_the_prompt_tokens_and_other_formats_do_not() -> None:
    body = {"model": "sim-1", "messages": messages("Revenue was $5 million.")}
    plain = parse({**body, "response_format": {"type": "json_object"}})
    structured = parse({**body, "response_format": RESPONSE_FORMAT})
    assert plain.prompt_tokens == estimate_tokens(plain.prompt) and plain.schema_prefix == ""
    assert structured.schema_prefix and structured.prompt == plain.prompt
    assert structured.prompt_tokens == estimate_tokens(structured.schema_prefix + structured.prompt)
    assert structured.prompt_tokens > plain.prompt_tokens + 50


def test_the_schema_is_served_from_the_cache_before_the_messages_sync_and_batch() -> None:
    """OpenAI: the schema "serves as a prefix to the system message and can be cached". Short
    messages under a long schema: the second request is served the schema (old code: nothing,
    its messages being under 1,024 tokens)."""
    with SimServer(SimConfig(p50_s=0, p95_s=0, seed=3)) as sim:
        sdk = client(sim)
        asked = [
            sdk.chat.completions.create(
                model="sim-1", messages=messages(f"Revenue was ${n} million."), response_format=LONG_FORMAT
            )
            for n in (5, 6)
        ]
    usage = [a.usage for a in asked]
    assert all(u is not None and u.prompt_tokens_details is not None for u in usage)
    first, second = usage[0], usage[1]
    assert first is not None and second is not None
    assert first.prompt_tokens > estimate_tokens(PREFIX)
    assert second.prompt_tokens_details is not None
    served = second.prompt_tokens_details.cached_tokens
    assert served is not None and served >= MIN_CACHED_TOKENS and served % STEP_TOKENS == 0
    assert estimate_tokens(PREFIX) - STEP_TOKENS <= served < first.prompt_tokens

    lines = [
        request_line(f"chunk-{i}", response_format=LONG_FORMAT, messages=messages(f"Chunk {i}."))
        for i in range(3)
    ]
    with SimServer(SimConfig(**QUICK, batch_duration_s=0.1)) as sim:
        sdk = client(sim)
        batch, _ = wait(sdk, submit(sdk, lines))
        output = download(sdk, batch.output_file_id)
    body_usage = [line["response"]["body"]["usage"] for line in output]
    assert all(u["prompt_tokens"] > estimate_tokens(PREFIX) for u in body_usage)
    cached = sorted(u["prompt_tokens_details"]["cached_tokens"] for u in body_usage)
    assert cached[0] == 0 and all(c >= MIN_CACHED_TOKENS for c in cached[1:])
