"""The settings of reading filings (a group of `Settings`, as in `pipeline.core.setting_groups`):
what a run takes, how EDGAR submissions are read, how a filing is cut into chunks."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from pipeline.core import constants as c


class InputSettings(BaseSettings):
    """Reading filings: what a run takes, and how a filing is cut into chunks."""

    heading: ClassVar[str] = "Input and chunks"

    max_file_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1,
        description="a file whose text to send (after an HTML or EDGAR submission file is converted) is "
        "larger is skipped with the reason",
    )
    max_source_bytes: int = Field(
        default=1024 * 1024 * 1024,
        ge=1,
        description="a file larger than this on disk is skipped unread (a 10-K's complete submission "
        "file is often 10-60 MB, of which the text sent is a fraction)",
    )
    exhibit_types: str = Field(
        default="EX-13*,EX-99*",
        description="exhibits of an EDGAR submission read with its primary document (patterns of "
        "<TYPE>, comma-separated: EX-13 holds some 10-Ks' financial statements, EX-99 an 8-K's "
        "release); every other part is left out and counted with its reason",
    )
    form_types: str = Field(
        default="*",
        description="forms a run reads (patterns of the form type, e.g. '10-K*,10-Q*,8-K*'): a filing "
        "whose header or cover states another form is skipped with the reason",
    )
    max_document_tokens: int = Field(
        default=0, ge=0, description="files estimated above this many tokens are skipped (0: no cap)"
    )
    max_run_tokens: int = Field(
        default=0, ge=0, description="a run takes files until their estimated tokens reach this (0: no cap)"
    )
    follow_links: bool = Field(
        default=False,
        description="read a symbolic link under a submitted directory (submit, run, the nightly inbox) when "
        "it resolves under that directory; off: every link is skipped with the reason",
    )
    early_documents: int = Field(
        default=32,
        ge=1,
        le=10_000,
        description="a larger run's first documents go to the workers while the rest is still being stored",
    )
    """A run's first documents sent while the rest is stored: their chunks (several each, answered
    side by side) keep two workers of 32 threads busy for the seconds that storing hundreds of
    filings takes, and storing fewer first starts the calls sooner."""
    submit_processes: int = Field(
        default=0,
        ge=0,
        le=64,
        description="processes that read and chunk a submit's files side by side after its first 1,000 "
        "(0: one per CPU, at most 4; 1: none, the submitting process reads every file)",
    )
    """Reading (the intake's parsing, tiktoken, the section and injection scans) is most of a
    submit's CPU: `pipeline.ingest.readers`."""

    chunk_tokens: int = Field(default=6_000, ge=200, description="largest chunk, in estimated tokens")
    model_context_tokens: int = Field(
        default=128_000,
        ge=1000,
        description=f"the extraction model's context window: chunks are at most this less the prompt "
        f"({c.CACHED_PROMPT_RESERVE_TOKENS:,} tokens in the cached layout, {c.EXTRACT_PROMPT_RESERVE_TOKENS} "
        "in the compact one) and PIPELINE_EXTRACT_MAX_TOKENS, and at most PIPELINE_CHUNK_TOKENS",
    )
    prompt_layout: Literal["auto", "cached", "compact"] = Field(
        default="auto",
        description="how an extraction prompt is laid out; cached: the answer's schema, instructions and "
        "a guide to the form (just over 1,024 tokens, the same for every call), then the filing's metadata, "
        "cover and contents (the same for its chunks), then the chunk, so that a provider's prompt cache "
        "serves what repeats; compact: the layout before issue 50 (~400 tokens around the chunk, nothing "
        "cached), for a model with a small context or a small cached-input discount; auto: cached where "
        "the model's cached-input price (the price table, PIPELINE_LLM_PRICES) makes it cost less, "
        "compact where it does not, said at submit and in the plan",
    )
    chunk_overlap_tokens: int = Field(default=200, ge=0, description="overlap between consecutive chunks")
    extract_max_tokens: int = Field(default=1_500, ge=64, description="`max_tokens` of an extraction answer")
