"""PIPELINE_PROMPT_LAYOUT=auto (issue 50): the cached layout for a run whose model's cached input
is discounted enough for it to cost less than the compact one, the compact one otherwise.

The cached layout sends more prompt tokens per call than the compact one (a guide to the form, the
filing's context: `extra`) so that a prefix of each call is served from the provider's cache
(`served`) at the cached-input price. Per call, in tokens at the input price, at a discount d
(1 - cached-input price / input price):

    cached - compact = extra - d x served

so it pays where d > extra / served: the break-even discount, which `Settings.chosen_layout`
takes as c.CACHED_LAYOUT_BREAK_EVEN (the core cannot count the layout; a test keeps the two
together). Both are counted with the run's
model's tokenizer, for a filing of CHUNKS_PER_FILING chunks whose context reaches its caps
(the extra tokens every call pays; its first chunk is served the shared instructions, its later
ones the filing's context too, in 128-token steps, as `pipeline.runs.cache_estimate` counts
them). A model without a cached-input price (nothing discounted) gets the compact layout.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass

from pipeline.core.constants import PROMPT_VERSIONS
from pipeline.core.settings import Settings
from pipeline.extraction import custom, layout
from pipeline.extraction.schemas import FilingExtraction
from pipeline.ingest import filing_context
from pipeline.llm import prompts
from pipeline.llm.tokens import MESSAGE_OVERHEAD_TOKENS, counter_for

log = logging.getLogger(__name__)

CHUNKS_PER_FILING = 5
"""Chunks of a typical filing at the default chunk size (the 22 example filings: 5.6)."""
METADATA_TOKENS = 40
"""The context's metadata lines (form, company, CIK, period, fiscal year)."""
MIN_CACHED_TOKENS = 1_024
STEP_TOKENS = 128


def servable(shared_tokens: int) -> int:
    """What a prefix of `shared_tokens` tokens seen before is served from the cache (OpenAI: from
    1,024 tokens, in steps of 128)."""
    return shared_tokens // STEP_TOKENS * STEP_TOKENS if shared_tokens >= MIN_CACHED_TOKENS else 0


def shared_tokens(model: str, schema: str | None = None) -> tuple[int, int]:
    """(the tokens every call of the run begins with, those a filing's calls share besides its
    context's), counted with `model`'s tokenizer. Every call begins with the answer's schema:
    sent in `response_format`, which OpenAI counts and caches as a prefix to the system
    message, or stated at the system message's end where the mode does not carry it."""
    count = counter_for(model)
    answer_model = custom.load_schema(schema) if schema else FilingExtraction
    system = layout.system_message(answer_model, custom=schema is not None)
    stated = count(json.dumps(answer_model.model_json_schema()))
    every_call = stated + count(system) + MESSAGE_OVERHEAD_TOKENS
    return every_call, count(layout.shared_by_the_filing("")) + MESSAGE_OVERHEAD_TOKENS


def compact_tokens(model: str) -> int:
    """The compact layout's prompt tokens besides the chunk and its hint: the schema and its
    instructions (10-K schema)."""
    count = counter_for(model)
    schema = count(json.dumps(FilingExtraction.model_json_schema()))
    messages = prompts.extract_messages("", 0, 1)
    return schema + sum(count(m["content"]) + MESSAGE_OVERHEAD_TOKENS for m in messages)


@functools.lru_cache(maxsize=16)
def break_even_discount(model: str) -> float:
    """The cached-input discount above which the cached layout costs less per filing than the
    compact one, for the 10-K schema (module docstring)."""
    count = counter_for(model)
    every_call, per_filing = shared_tokens(model)
    context = filing_context.COVER_TOKENS + filing_context.CONTENTS_TOKENS + METADATA_TOKENS
    part = count("1 of 1 of the filing.\n" + prompts.delimited(""))
    compact = compact_tokens(model)
    extra = every_call + per_filing + context + part - compact
    later = CHUNKS_PER_FILING - 1
    served = (servable(every_call) + later * servable(every_call + per_filing + context)) / CHUNKS_PER_FILING
    return min(1.0, extra / served) if served else 1.0


@dataclass(frozen=True)
class Choice:
    layout: str
    """cached or compact"""
    reason: str
    """Why, in one line: "layout: compact, because ..." """

    @property
    def prompt_version(self) -> str:
        return PROMPT_VERSIONS[self.layout]


def chosen(settings: Settings) -> Choice:
    """The layout a run submitted now is asked in (`Settings.chosen_layout`: PIPELINE_PROMPT_LAYOUT,
    or under `auto` the one that costs less at the model's prices); under `auto` logged once per
    process and reason."""
    layout_name, reason = settings.chosen_layout()
    if settings.prompt_layout == "auto":
        _say_once(reason)
    return Choice(layout_name, reason)


@functools.lru_cache(maxsize=64)
def _say_once(reason: str) -> None:
    log.info("%s (PIPELINE_PROMPT_LAYOUT=auto)", reason)
