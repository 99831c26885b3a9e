"""A chunk's extraction prompt, the version its stored answer is keyed on, and the key that asks
a provider to route a filing's requests to one cache: the same for a synchronous call, a Batch
API line and an escalation.

The layout follows the run's prompt version (`runs.prompt_version`, set at submit from
PIPELINE_PROMPT_LAYOUT): the compact version's runs are asked as before issue 50, every other
in the cached layout (`pipeline.extraction.layout`).
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel

from pipeline.core.constants import COMPACT_PROMPT_VERSION
from pipeline.extraction import custom, layout
from pipeline.extraction.schemas import FilingExtraction
from pipeline.ingest import filing_context, sections
from pipeline.llm import prompts
from pipeline.storage.models import Chunk, Document

CACHE_KEY_HEX_DIGITS = 32
"""A `prompt_cache_key` is this many hex digits of a digest (OpenAI takes up to 64 characters)."""


def chunk_messages(
    chunk: Chunk, text: str, count: int, schema: str | None, *, doc: Document, version: str
) -> tuple[list[prompts.Message], type[BaseModel]]:
    """The extraction prompt of one chunk of `doc`, whose text is `text` (of `count` chunks), in
    the layout of `version` (the run's), and the model its answer validates against."""
    answer_model: type[BaseModel] = custom.load_schema(schema) if schema else FilingExtraction
    chunk_text = text[chunk.char_start : chunk.char_end]
    hint = sections.hint(chunk_text, chunk.section)
    if compact(version):
        if schema:
            messages = prompts.custom_extract_messages(
                chunk_text, chunk.idx, count, answer_model.__name__, hint
            )
        else:
            messages = prompts.extract_messages(chunk_text, chunk.idx, count, hint)
        return messages, answer_model
    context = filing_context.context_of(doc, text)
    messages = layout.messages(
        context, chunk_text, chunk.idx, count, answer_model, hint, custom=schema is not None
    )
    return messages, answer_model


def warm_up(version: str) -> None:
    """Build at a worker's start what the first chunk prompt of a run in `version` builds on its
    way: in the cached layout, the system message and the token
    encoding the filing's context is counted with (~0.3-0.7 s, and ~50 MB: a compact-layout
    worker does not load it)."""
    if compact(version):
        return
    layout.system_message(FilingExtraction, False)
    filing_context.warm_up()


def compact(version: str) -> bool:
    """Whether answers of `version` (a run's, or a chunk's with its schema) use the compact layout."""
    return version.split(":", 1)[0] == COMPACT_PROMPT_VERSION


def prompt_version(schema: str | None, version: str) -> str:
    """What stored answers are keyed on: the run's prompt version, and a user's schema if any."""
    if not schema:
        return version
    return f"{version}:{hashlib.sha256(schema.encode()).hexdigest()[:12]}"


def cache_key(doc: Document, version: str) -> str | None:
    """The `prompt_cache_key` of a document's requests: a digest of the prompt version and the
    filing's content hash, the same for every chunk of it (never a name or a path); None for a
    document without stored content."""
    if doc.sha256 is None:
        return None
    digest = hashlib.sha256(f"{version}|{doc.sha256}".encode()).hexdigest()
    return digest[:CACHE_KEY_HEX_DIGITS]
