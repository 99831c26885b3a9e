"""SQLAlchemy models. Table and column names are a public contract: analysts query them."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Date,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.storage.base import (
    ERROR_MAX_CHARS,
    TERMINAL_DOC_STATUSES,
    Base,
    DocStatus,
    IdType,
    JSONType,
    RunStatus,
    aware,
    table_of,
    utcnow,
)
from pipeline.storage.columns import RedactedText

# Re-exported: the models' module is where the rest of the code imports these from.
__all__ = [
    "ERROR_MAX_CHARS",
    "TERMINAL_DOC_STATUSES",
    "Base",
    "DocStatus",
    "IdType",
    "JSONType",
    "RunStatus",
    "aware",
    "table_of",
    "utcnow",
]


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    query: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.PENDING, index=True)
    model: Mapped[str] = mapped_column(String(100))
    prompt_version: Mapped[str] = mapped_column(String(40))
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    schema: Mapped[str | None] = mapped_column(String(200))
    """`module:Model` of a user's extraction schema (`--schema`); None: the 10-K schema."""
    reuse_answers: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    """Reuse stored chunk answers of earlier runs for unchanged filings (off: `--fresh`)."""
    resumes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """How often the watchdog resumed the run without progress since (reset by progress)."""
    resumed_at: Mapped[datetime | None]
    budget_usd: Mapped[float | None] = mapped_column(Float)
    """The run's spending cap (PIPELINE_RUN_BUDGET_USD at submit); None: no cap."""
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    """Sum of the priced calls' `llm_calls.cost_usd`, kept up to date as calls are recorded."""
    error: Mapped[str | None] = mapped_column(RedactedText)
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    """Indexed: the newest runs (`pipeline runs`, the newest run) are read from its end."""
    started_at: Mapped[datetime | None]
    stored_at: Mapped[datetime | None]
    """When the producer had stored every document of the run (an early start begins before)."""
    finished_at: Mapped[datetime | None]
    mode: Mapped[str] = mapped_column(String(8), default="sync", server_default="sync")
    """sync: every call over HTTP under the global limiter; batch: the provider's Batch API
    first (`llm_batches`), then synchronously what it has not answered in time."""
    mode_reason: Mapped[str | None] = mapped_column(Text)
    """Why the run has its mode (`--mode auto` decides from the deadline)."""
    deadline: Mapped[datetime | None]
    """When the report must be there (`--deadline`)."""
    dispatched_at: Mapped[datetime | None]
    """Batch mode: when the batch path handed the run to the synchronous path (the chord)."""
    batch_polled_at: Mapped[datetime | None]
    """Batch mode: the last poll of the run's batches (a quiet one is restarted)."""
    cutover_at: Mapped[datetime | None]
    """Batch mode: when the deadline made the run cancel its batches and go on synchronously."""
    extract_tier: Mapped[str | None] = mapped_column(String(8))
    """The tier the run's synchronous extract calls go at: flex (a flex run, or an auto run the
    planner hands to flex) or sync; None: sync (`pipeline.runs.tiers`)."""
    standard_from: Mapped[datetime | None]
    """An auto run with a deadline: from this moment what flex has not answered goes at the
    standard tier (only it still makes the deadline); a flex refusal after it is not waited out."""
    tier_reason: Mapped[str | None] = mapped_column(Text)
    """Why the planner chose `extract_tier` (at submit, or at the batch path's cutover)."""
    pruned_at: Mapped[datetime | None]
    """When `pipeline prune` began dropping the run's filing texts, chunks and call rows (on
    the database's clock); from then on the run cannot be retried."""
    estimate: Mapped[dict[str, Any] | None]
    """What `pipeline plan` estimated at submit, per mode (calls, tokens, cost, seconds): status
    and the report set the run's mode's figures against what it used."""
    pruned: Mapped[dict[str, Any] | None]
    """What the prune found and dropped: the run's call totals and chunks before it (what
    `pipeline status` shows of a pruned run), the rows and bytes it deleted, and `complete`
    once nothing is left to drop (`pipeline.storage.retention`)."""


class Content(Base):
    """Filing text, stored once per distinct content (an unchanged filing is not stored twice)."""

    __tablename__ = "contents"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    text: Mapped[str | None] = mapped_column(Text)
    """NULL once `pipeline prune` dropped it (no run that still has its texts uses it); the
    row, its hash and size stay, and a new submit of the same filing stores the text again."""
    bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    source_offsets: Mapped[list[list[int]] | None] = mapped_column(JSONType)
    """[offset in `text`, byte in the source file] per line of a converted filing."""


class Document(Base):
    __tablename__ = "documents"
    __table_args__ = (
        Index("ix_documents_run_status", "run_id", "status"),
        Index("ix_documents_status_lease", "status", "lease_expires_at"),
        # A run's documents in the order they are listed (the documents CSV), with no sort.
        Index("ix_documents_run_path", "run_id", "path", "id"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str | None] = mapped_column(ForeignKey("contents.sha256"), index=True)
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    status: Mapped[str] = mapped_column(String(16), default=DocStatus.PENDING)
    error: Mapped[str | None] = mapped_column(RedactedText)
    """Why the document failed or was skipped (None otherwise)."""
    note: Mapped[str | None] = mapped_column(Text)
    """What intake remarked on a usable file (text not UTF-8, decoded as Windows-1252)."""
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    injection_flag: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """The text holds instruction-like passages aimed at a model (`pipeline.ingest.injection`)."""
    injection_excerpt: Mapped[str | None] = mapped_column(Text)
    """The first such passage, short, whitespace collapsed, control characters escaped."""
    tier: Mapped[str | None] = mapped_column(String(8))
    """Which tier answered it: batch, flex or sync (the dearest its chunks used), or reused (an
    earlier run's answers); set when it is extracted."""
    tier_reason: Mapped[str | None] = mapped_column(Text)
    """Why it was answered at that tier (the run's mode, or the planner's decision)."""
    trace_parent: Mapped[str | None] = mapped_column(String(64))
    """The W3C traceparent of its submit span (`pipeline.core.tracing`); None: traces were off."""
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    """The worker process extracting it (`host:pid:tag`, its heartbeat's name) while running."""
    lease_scope: Mapped[str | None] = mapped_column(String(64))
    """The deployment (one broker) whose workers may reclaim it: the id kept in its Redis."""
    lease_expires_at: Mapped[datetime | None]
    """Until when the owner holds it; its process's heartbeat renews this while it works."""
    fence: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Fencing token: raised by every lease granted; a write from an older lease is refused."""
    reclaims: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """How often a live worker took it back from a dead owner."""
    reclaimed_from: Mapped[str | None] = mapped_column(String(200))
    """The dead owner it was last reclaimed from."""
    source_format: Mapped[str | None] = mapped_column(String(12))
    """submission, html, xml or text (`pipeline.ingest.filing`); NULL: stored before 0019."""
    # The filing's own metadata (SGML header, inline-XBRL dei: facts); a Form 4's company is its issuer.
    form_type: Mapped[str | None] = mapped_column(String(20), index=True)
    company_name: Mapped[str | None] = mapped_column(String(300))
    cik: Mapped[str | None] = mapped_column(String(10))
    period_of_report: Mapped[date | None] = mapped_column(Date)
    fiscal_year: Mapped[int | None] = mapped_column(Integer)
    accession_number: Mapped[str | None] = mapped_column(String(25))
    filing_date: Mapped[date | None] = mapped_column(Date)
    intake: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    """Documents taken and left out (with reasons), sections found and doubted, metadata sources."""


class Chunk(Base):
    """A token-sized window of a document; `result` holds its validated answer once done."""

    __tablename__ = "chunks"
    __table_args__ = (
        UniqueConstraint("document_id", "idx", name="uq_chunks_document_idx"),
        # A run's chunks, and those answered, counted from the index alone (status, runs).
        Index("ix_chunks_run_id", "run_id", "completed_at"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    run_id: Mapped[str | None] = mapped_column(String(32))
    """The document's run (0023): a run's chunks found by their own index. Deleted with the
    document."""
    idx: Mapped[int] = mapped_column(Integer)
    char_start: Mapped[int] = mapped_column(Integer)
    char_end: Mapped[int] = mapped_column(Integer)
    token_estimate: Mapped[int] = mapped_column(Integer)
    result: Mapped[dict[str, Any] | None]
    prompt_version: Mapped[str | None] = mapped_column(String(40))
    model: Mapped[str | None] = mapped_column(String(100))
    completed_at: Mapped[datetime | None]
    reused_from: Mapped[int | None] = mapped_column(IdType)
    """The chunk of an earlier run whose answer this one reuses (same text, prompt, model)."""
    section: Mapped[str | None] = mapped_column(String(40))
    """The filing section the chunk starts in ("Item 1A"), when the text has item headings."""
    batch_id: Mapped[int | None] = mapped_column(ForeignKey("llm_batches.id"), index=True)
    """The batch whose input file holds the chunk's request, until that batch is read."""
    batch_tries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    token_p: Mapped[dict[str, float] | None] = mapped_column(JSONType)
    """The probability of each scalar field's tokens in the answer (PIPELINE_LLM_LOGPROBS)."""
    """Batches the chunk's request went in (PIPELINE_BATCH_LINE_ATTEMPTS caps them)."""


class Extraction(Base):
    __tablename__ = "extractions"
    # The streaming synthesis looks up a run's summaries no partial has taken yet.
    __table_args__ = (Index("ix_extractions_run_partial", "run_id", "partial_id"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"), unique=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    company: Mapped[str | None] = mapped_column(String(300), index=True)
    fiscal_year: Mapped[int | None] = mapped_column(Integer)
    revenue_usd: Mapped[float | None] = mapped_column(Float)
    revenue_quote: Mapped[str | None] = mapped_column(Text)
    revenue_grounded: Mapped[bool | None] = mapped_column(Boolean)
    """Whether revenue_quote was found in the filing's text; null when there is no quote."""
    revenue_quote_start: Mapped[int | None] = mapped_column(Integer)
    revenue_quote_end: Mapped[int | None] = mapped_column(Integer)
    """Character offsets of the quote in the filing's text (contents.text[start:end])."""
    quotes_total: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    quotes_grounded: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    data: Mapped[dict[str, Any]]
    company_confidence: Mapped[float | None] = mapped_column(Float)
    fiscal_year_confidence: Mapped[float | None] = mapped_column(Float)
    revenue_confidence: Mapped[float | None] = mapped_column(Float)
    """How far to trust each field, in [0, 1] (pipeline.extraction.confidence; NULL: a user's
    schema, or an extraction stored before confidence was scored)."""
    revenue_match: Mapped[str | None] = mapped_column(String(12))
    """How the revenue quote was found: exact, normalised, fuzzy or none."""
    escalated: Mapped[str | None] = mapped_column(String(100))
    """Fields the escalation model answered, comma-separated (NULL: none)."""
    summary: Mapped[str | None] = mapped_column(Text)
    partial_id: Mapped[int | None] = mapped_column(ForeignKey("synthesis_partials.id"), index=True)
    """The partial synthesis that took this summary in while the run still extracted; the
    final synthesis reads that partial instead of the summary."""
    model: Mapped[str] = mapped_column(String(100))
    prompt_version: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SynthesisPartial(Base):
    """An answer to the run's question from a batch of its summaries, made while the run still
    extracts (the final synthesis then has fewer levels left to wait for)."""

    __tablename__ = "synthesis_partials"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    text: Mapped[str | None] = mapped_column(Text)
    """None while its call runs, or for good when the call failed or its worker died: the
    final synthesis then reads its documents' summaries instead."""
    documents: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RiskFactor(Base):
    __tablename__ = "risk_factors"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"), index=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(Text)
    quote: Mapped[str] = mapped_column(Text)
    grounded: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """Whether the quote was found in the filing's text (verbatim or whitespace/case normalised)."""
    quote_start: Mapped[int | None] = mapped_column(Integer)
    quote_end: Mapped[int | None] = mapped_column(Integer)
    confidence: Mapped[float | None] = mapped_column(Float)
    match: Mapped[str | None] = mapped_column(String(12))
    """How the quote was found: exact, normalised, fuzzy or none."""


class Correction(Base):
    """A person's review of one field (`pipeline review import`): the value it should have (NULL:
    none), who said so and when. The newest per field overrides the extraction in the views."""

    __tablename__ = "corrections"
    __table_args__ = (Index("ix_corrections_document_field", "document_id", "field"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    field: Mapped[str] = mapped_column(String(20))
    """company, fiscal_year, revenue_usd or risk_title."""
    position: Mapped[int | None] = mapped_column(Integer)
    """The risk factor's position (risk_title only)."""
    value: Mapped[str | None] = mapped_column(Text)
    original: Mapped[str | None] = mapped_column(Text)
    """The value the sheet showed (what the reviewer confirmed or corrected)."""
    reviewer: Mapped[str] = mapped_column(String(200))
    reviewed_at: Mapped[datetime]
    source: Mapped[str | None] = mapped_column(String(300))
    """The file the correction was imported from."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class LLMCall(Base):
    __tablename__ = "llm_calls"
    __table_args__ = (Index("ix_llm_calls_run_stage", "run_id", "stage"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    document_id: Mapped[int | None] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), index=True
    )
    chunk_idx: Mapped[int | None] = mapped_column(Integer)
    stage: Mapped[str] = mapped_column(String(20))
    model: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Of `prompt_tokens`, those the provider served from its prompt cache (its usage's
    `prompt_tokens_details.cached_tokens`), priced at the cached-input price."""
    latency_ms: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(RedactedText)
    key_slot: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Which configured API key (by position) the call used; never the key itself."""
    limiter_wait_ms: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    cost_usd: Mapped[float | None] = mapped_column(Float)
    """USD by PIPELINE_LLM_PRICES (batch calls: at batch prices); NULL when the model has no price."""
    mode: Mapped[str] = mapped_column(String(8), default="sync", server_default="sync")
    """sync: an HTTP call; batch: a line of a Batch API output file."""
    sync_cost_usd: Mapped[float | None] = mapped_column(Float)
    """What the call's tokens cost at synchronous prices (for batch calls: what batch saved)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class LLMBatch(Base):
    """One provider batch of a run: written before anything depends on it, so that a crash
    between upload and create (or during ingestion) is picked up where it stopped."""

    __tablename__ = "llm_batches"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    provider_batch_id: Mapped[str | None] = mapped_column(String(200))
    input_file_id: Mapped[str | None] = mapped_column(String(200))
    output_file_id: Mapped[str | None] = mapped_column(String(200))
    error_file_id: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20))
    """preparing, uploaded (ours), the provider's (validating ... completed, failed, expired,
    cancelling, cancelled), then ingested (ours: its files are read)."""
    requests: Mapped[int] = mapped_column(Integer)
    completed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    failed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    enqueued_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    estimated_cost_usd: Mapped[float | None] = mapped_column(Float)
    """What the batch may cost at most (prompts, and every line's max_tokens, at batch prices):
    held against the run's budget until its lines are ingested and their cost recorded."""
    output_lines_done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error_lines_done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Lines of each file ingested (committed with their answers): a new reader starts after them."""
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Uploads begun (more than one: a crash interrupted one)."""
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Polls in a row that failed on this batch; at five its lines go elsewhere."""
    error: Mapped[str | None] = mapped_column(RedactedText(ERROR_MAX_CHARS))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime | None]
    submitted_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    cancelled_at: Mapped[datetime | None]
    ingested_at: Mapped[datetime | None]


class Report(Base):
    __tablename__ = "reports"

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    markdown: Mapped[str] = mapped_column(Text)
    json: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class XbrlFact(Base):
    """A fact the filing states in its own inline XBRL, chosen by its context
    (`pipeline.ingest.filing.xbrl`): the second witness of the model's answer. One row per
    document and field, with the concept and context used, or `why` no fact fits."""

    __tablename__ = "xbrl_facts"
    __table_args__ = (UniqueConstraint("document_id", "field", name="uq_xbrl_facts_document_field"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    field: Mapped[str] = mapped_column(String(20))
    """revenue_usd (the extraction's column it witnesses)."""
    value: Mapped[float | None] = mapped_column(Float)
    concept: Mapped[str | None] = mapped_column(String(200))
    context: Mapped[str | None] = mapped_column(String(200))
    period_start: Mapped[date | None] = mapped_column(Date)
    period_end: Mapped[date | None] = mapped_column(Date)
    why: Mapped[str | None] = mapped_column(Text)


class DocumentAttempt(Base):
    """An earlier round of a document: how it ended before `pipeline retry` sent it again (the
    document's row holds the current round)."""

    __tablename__ = "document_attempts"
    __table_args__ = (UniqueConstraint("document_id", "round", name="uq_document_attempts_round"),)

    id: Mapped[int] = mapped_column(IdType, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    round: Mapped[int] = mapped_column(Integer)
    """1 for the document's first round, then one more per retry."""
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(RedactedText)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    """Deliveries the round counted (`documents.attempts` then)."""
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    retried_at: Mapped[datetime] = mapped_column(default=utcnow)
    """When `pipeline retry` ended the round (on the database's clock)."""
