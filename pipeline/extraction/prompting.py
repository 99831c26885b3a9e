"""A chunk's extraction prompt, and the version its stored answer is keyed on: the same for a
synchronous call and a Batch API line."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel

from pipeline.core.constants import PROMPT_VERSION
from pipeline.extraction import custom
from pipeline.extraction.schemas import FilingExtraction
from pipeline.ingest import sections
from pipeline.llm import prompts
from pipeline.storage.models import Chunk


def chunk_messages(
    chunk: Chunk, text: str, count: int, schema: str | None
) -> tuple[list[prompts.Message], type[BaseModel]]:
    """The extraction prompt of one chunk of a document's `text` (of `count` chunks), and the
    model its answer validates against: the same for a synchronous call and a batch line."""
    answer_model: type[BaseModel] = custom.load_schema(schema) if schema else FilingExtraction
    chunk_text = text[chunk.char_start : chunk.char_end]
    hint = sections.hint(chunk_text, chunk.section)
    if schema:
        messages = prompts.custom_extract_messages(chunk_text, chunk.idx, count, answer_model.__name__, hint)
    else:
        messages = prompts.extract_messages(chunk_text, chunk.idx, count, hint)
    return messages, answer_model


def prompt_version(schema: str | None) -> str:
    """What stored answers are keyed on: the prompt's version, and a user's schema if any."""
    if not schema:
        return PROMPT_VERSION
    return f"{PROMPT_VERSION}:{hashlib.sha256(schema.encode()).hexdigest()[:12]}"
