"""The cached layout (issue 50): what is the same across calls comes first, byte for byte, and
passes a provider's 1,024-token caching minimum; the compact layout is the prompt of before.

The pure checks count with the project's tokenizer (both OpenAI encodings) and with the
simulator's count; the last test asks the simulator, whose prompt cache follows OpenAI's guide,
for two chunks of one filing through the real client.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import date
from typing import Any

import pytest

from pipeline.core.constants import CACHED_LAYOUT_BREAK_EVEN, COMPACT_PROMPT_VERSION, PROMPT_VERSION
from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings
from pipeline.extraction import layout, layout_choice
from pipeline.extraction.prompting import cache_key, chunk_messages, prompt_version
from pipeline.extraction.schemas import FilingExtraction
from pipeline.ingest import filing_context, sections
from pipeline.llm import prompts, tokens
from pipeline.llm.client import CallRecord, LLMClient
from pipeline.storage.models import Chunk, Document
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.sim.prompt_cache import MIN_CACHED_TOKENS
from pipeline_dev.sim.request import document_text, estimate_tokens, schema_prefix
from pipeline_dev.synth_filings import generate_filing


def _filing(seed: int = 4, size: int = 40_000) -> tuple[Document, str, list[Chunk]]:
    """A generated 10-K, its (unsaved) document row and its chunks, as submit cuts them."""
    text, _ = generate_filing(seed, seed=9, target_bytes=size)
    doc = Document(
        id=seed,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        form_type="10-K",
        company_name="Acme Widgets Inc.",
        cik="0000123456",
        period_of_report=date(2024, 12, 31),
        fiscal_year=2024,
    )
    spans = sections.split_by_section(text, 1_500, 100, sections.find_sections(text, "10-K"))
    chunks = [
        Chunk(idx=s.idx, char_start=s.char_start, char_end=s.char_end, token_estimate=1, section=s.section)
        for s in spans
    ]
    return doc, text, chunks


def _asked(doc: Document, text: str, chunks: list[Chunk], version: str = PROMPT_VERSION) -> list[Any]:
    return [chunk_messages(c, text, len(chunks), None, doc=doc, version=version)[0] for c in chunks]


def _shared_prefix(count: Any) -> int:
    """The tokens every call shares: the answer's schema, which OpenAI counts and caches as a
    prefix to the system message (the simulator too), and the system message."""
    schema = prompts.response_format(FilingExtraction)
    assert schema is not None
    return int(count(json.dumps(schema["json_schema"]))) + int(
        count(layout.system_message(FilingExtraction, custom=False))
    )


def test_the_part_every_call_shares_passes_the_caching_minimum_in_every_count() -> None:
    """Schema, instructions and guide just reach 1,024 tokens: over it by a margin in both
    OpenAI encodings, and in the simulator's count (which counts this text as fewer tokens);
    every token over the minimum is paid on every call, cached or not."""
    counts = {
        "o200k_base": _shared_prefix(tokens.counter_for("gpt-4o")),
        "cl100k_base": _shared_prefix(tokens.counter_for("gpt-4")),
    }
    assert min(counts.values()) >= MIN_CACHED_TOKENS + 64, counts  # a margin over 1,024
    assert max(counts.values()) <= MIN_CACHED_TOKENS + 160, (
        f"every token here is paid on every call: {counts}"
    )
    schema = prompts.response_format(FilingExtraction)
    simulated = estimate_tokens(schema_prefix(schema) + layout.system_message(FilingExtraction, custom=False))
    assert MIN_CACHED_TOKENS <= simulated <= MIN_CACHED_TOKENS + 128, simulated


def test_the_guide_names_no_value_an_answer_could_copy() -> None:
    """Small models copy what the prompt shows as an answer (SmolLM2-135M named every filing
    after a worked example's company): the guide says where the form states each field and
    shows no company, year or figure."""
    names = re.sub(r"10-[KQ]|Item \d+A?", "", layout.GUIDE)  # the forms' and items' names
    assert not re.search(r"\d", names), "no year or figure"
    assert not re.search(r"\b[A-Z][a-z]+ (?:[A-Z][a-z]+ )*(?:Inc|Corp|Co|Ltd|plc)\b", layout.GUIDE)
    for field in FilingExtraction.model_fields:
        assert f"- {field}:" in layout.GUIDE, f"the guide says where {field} is stated"
    assert layout.GUIDE in layout.system_message(FilingExtraction, custom=False)
    assert layout.GUIDE not in layout.system_message(FilingExtraction, custom=True)


def test_every_chunk_of_a_filing_shares_its_instructions_and_context_byte_for_byte() -> None:
    doc, text, chunks = _filing()
    asked = _asked(doc, text, chunks)
    assert len(asked) >= 3
    context = filing_context.context_of(doc, text)
    shared = "The filing's context:\n" + prompts.delimited(context) + "\n\nPart "
    for number, (system, user) in enumerate(asked):
        assert system == asked[0][0], "one system message for every call"
        assert user["content"].startswith(shared), number
        # Both blocks are data a model reads whole: the context, then the chunk.
        chunk = chunks[number]
        assert document_text([user]) == f"{context}\n\n{text[chunk.char_start : chunk.char_end].strip()}"
    other_doc, other_text, other_chunks = _filing(seed=5)
    assert _asked(other_doc, other_text, other_chunks)[0][0] == asked[0][0], "and across filings"
    assert "Company: Acme Widgets Inc." in context and "Fiscal year: 2024" in context
    assert "Item 1A" in context.split("Item headings:")[1]


def test_the_compact_layout_is_the_prompt_of_before() -> None:
    doc, text, chunks = _filing()
    compact = _asked(doc, text, chunks, COMPACT_PROMPT_VERSION)
    for chunk, messages in zip(chunks, compact, strict=True):
        hint = sections.hint(text[chunk.char_start : chunk.char_end], chunk.section)
        assert messages == prompts.extract_messages(
            text[chunk.char_start : chunk.char_end], chunk.idx, len(chunks), hint
        )
    assert prompt_version(None, COMPACT_PROMPT_VERSION) == "extract-v3" != PROMPT_VERSION
    assert Settings(_env_file=None, prompt_layout="compact").prompt_version() == "extract-v3"  # type: ignore[call-arg]


def test_the_schema_is_stated_once_in_every_structured_output_mode() -> None:
    """In response_format where the mode carries it (not again in the messages), at the system
    message's end where it does not."""
    doc, text, chunks = _filing()
    messages = _asked(doc, text, chunks[:1])[0]
    assert "<schema>" not in messages[0]["content"]
    for mode in prompts.STRUCTURED_MODES:
        asked, fmt = prompts.structured_request(messages, FilingExtraction, mode)
        stated = asked[0]["content"].count("<schema>")
        if mode in prompts.CARRIES_SCHEMA:
            assert asked == messages and fmt is not None and stated == 0, mode
        else:
            assert stated == 1 and asked[0]["content"].startswith(messages[0]["content"]), mode
            assert asked[1:] == messages[1:], mode


def test_the_filing_context_is_bounded_and_follows_the_metadata() -> None:
    cover = "".join(
        f"Cover line {i} of a long cover page with checkboxes [X] and addresses.\n" for i in range(3_000)
    )
    items = "".join(
        f"Item {n}. A heading of item {n} that goes on and on for a while\n" + "Body. " * 500
        for n in range(1, 16)
    )
    facts = filing_context.FilingFacts("10-K", "Big  Cover\nCorp", None, None, None)
    context = filing_context.build(cover + items, facts)
    count = tokens.counter_for(filing_context.COUNTED_AS)
    limit = filing_context.COVER_TOKENS + filing_context.CONTENTS_TOKENS + 80
    assert count(context) <= limit
    assert "Company: Big Cover Corp" in context and "CIK" not in context, "only what the intake read"
    assert "Cover line 0 " in context and "Cover line 2999" not in context
    assert filing_context.build("Plain text, no items.", filing_context.FilingFacts()).endswith(
        "Plain text, no items."
    )


def test_a_filing_s_cache_key_is_the_same_for_its_chunks_and_names_no_file() -> None:
    doc, _, _ = _filing()
    key = cache_key(doc, PROMPT_VERSION)
    assert key is not None and len(key) == 32 and int(key, 16) >= 0
    assert key == cache_key(doc, PROMPT_VERSION) != cache_key(doc, COMPACT_PROMPT_VERSION)
    other, _, _ = _filing(seed=5)
    assert cache_key(other, PROMPT_VERSION) != key
    doc.path = "/secret/acme-10k.txt"
    assert cache_key(doc, PROMPT_VERSION) == key


def test_a_context_too_small_for_the_cached_layout_says_to_choose_the_compact_one() -> None:
    small = {"model_context_tokens": 2_048, "extract_max_tokens": 256}
    with pytest.raises(ConfigError, match="PIPELINE_PROMPT_LAYOUT=compact"):
        Settings(_env_file=None, prompt_layout="cached", **small).chunk_budget_tokens()  # type: ignore[call-arg]
    for layout_setting in ("compact", "auto"):  # auto takes the compact layout there
        settings = Settings(_env_file=None, prompt_layout=layout_setting, **small)  # type: ignore[call-arg]
        assert settings.chunk_budget_tokens() == 2_048 - 600 - 256
        assert layout_choice.chosen(settings).layout == "compact"


def test_auto_takes_the_cached_layout_only_where_the_model_s_cached_discount_pays_for_it() -> None:
    """Per call the cached layout sends `extra` tokens more to be `served` a prefix at the
    cached-input price: it pays above a discount of extra / served (about 80 % here)."""

    def chosen(model: str, prices: str | None = None) -> layout_choice.Choice:
        settings = Settings(_env_file=None, llm_model=model, llm_prices=prices)  # type: ignore[call-arg]
        return layout_choice.chosen(settings)

    for model in ("gpt-4o-mini", "gpt-4"):  # o200k_base and cl100k_base
        needed = layout_choice.break_even_discount(model)
        assert abs(needed - CACHED_LAYOUT_BREAK_EVEN) <= 0.03, (model, needed)
    cheap = chosen("gpt-4o-mini")  # the price table: cached input 50 % off
    assert cheap.layout == "compact" and cheap.prompt_version == COMPACT_PROMPT_VERSION
    assert cheap.reason.startswith("layout: compact, because gpt-4o-mini's cached input is only 50 % off")
    assert chosen("gpt-4.1-mini").layout == "compact"  # 75 % off
    deep = chosen("gpt-5-mini")  # 90 % off
    assert deep.layout == "cached" and deep.prompt_version == PROMPT_VERSION, deep
    assert chosen("sim-1", "sim-1:1/2/0.05").layout == "cached", "PIPELINE_LLM_PRICES decides too"
    assert chosen("sim-1", "sim-1:1/2/0.5").layout == "compact"
    assert "no cached-input price" in chosen("sim-1", "sim-1:1/2").reason
    explicit = Settings(_env_file=None, llm_model="gpt-4o-mini", prompt_layout="cached")  # type: ignore[call-arg]
    assert layout_choice.chosen(explicit).layout == "cached", "a layout set is kept"


def test_a_filing_s_later_chunks_are_served_instructions_and_context_from_the_cache() -> None:
    """Through the real client to the simulator: the cached layout's second chunk is served its
    shared prefix (instructions and the filing's context, in 128-token steps); the compact
    layout's shares less than the minimum and is served nothing."""
    doc, text, chunks = _filing()
    with SimServer(SimConfig(p50_s=0, p95_s=0, seed=3)) as sim:
        client = LLMClient(Settings(_env_file=None, llm_base_url=sim.base_url), pool_size=1)  # type: ignore[call-arg]
        try:
            served: dict[str, list[int]] = {}
            for version in (PROMPT_VERSION, COMPACT_PROMPT_VERSION):
                records: list[CallRecord] = []
                for messages in _asked(doc, text, chunks[:2], version):
                    client.structured(
                        messages, FilingExtraction, stage="extract", max_tokens=800, sink=records.append
                    )
                served[version] = [r.cached_tokens for r in records]
        finally:
            client.close()
    schema = prompts.response_format(FilingExtraction)
    shared = estimate_tokens(schema_prefix(schema) + layout.system_message(FilingExtraction, custom=False))
    assert served[PROMPT_VERSION][0] == 0, "the first call pays for everything"
    assert served[PROMPT_VERSION][1] >= shared // 128 * 128 >= MIN_CACHED_TOKENS
    assert served[COMPACT_PROMPT_VERSION] == [0, 0]
