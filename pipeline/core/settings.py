"""One settings class for every process: environment (prefix PIPELINE_) and `.env`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.core import constants as c
from pipeline.core.cost import Price, parse_prices
from pipeline.core.deadline import parse_deadline
from pipeline.core.prices import list_prices


class Settings(BaseSettings):
    """Configuration. Unset URLs mean the embedded defaults (`pipeline run`)."""

    model_config = SettingsConfigDict(
        env_prefix="PIPELINE_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
        hide_input_in_errors=True,  # a refused URL's password stays out of the message
    )

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL (postgresql://... is used with psycopg 3); unset: a SQLite file in "
        "the data directory, for `pipeline run`, `status` and `report` only (`worker`, `submit`, "
        "`resume` and `watchdog` refuse to start without it)",
    )
    redis_url: str | None = Field(
        default=None,
        description="broker and result backend, redis:// or rediss://; unset: an embedded Redis "
        "(`pipeline run` only)",
    )
    llm_base_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("PIPELINE_LLM_BASE_URL", "OPENAI_BASE_URL"),
        description="OpenAI-compatible endpoint, e.g. https://api.openai.com/v1; unset: the built-in "
        "simulator (`pipeline run` only)",
    )
    llm_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("PIPELINE_LLM_API_KEY", "OPENAI_API_KEY"),
        description="the endpoint's API key, sent only in the Authorization header",
    )
    llm_model: str = Field(default=c.DEFAULT_MODEL, description="model name sent to the endpoint")
    llm_timeout_s: float = Field(default=c.DEFAULT_LLM_TIMEOUT_S, gt=0, description="timeout of one LLM call")
    llm_structured_output: Literal["auto", "json_schema", "json_object_schema", "json_object", "prompt"] = (
        Field(
            default="auto",
            description="how extraction asks for JSON; auto: json_schema, one step down each time the "
            "endpoint rejects the request's shape (kept in Redis for every worker)",
        )
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="worker logs: text with run/document ids, or JSON lines"
    )
    worker_concurrency: int = Field(
        default=8,
        ge=1,
        le=512,
        description="threads per worker process (and its HTTP and database pool size)",
    )
    worker_pool: Literal["threads", "prefork", "solo"] = Field(
        default="threads", description="set by `pipeline worker --pool`: sizes the per-process pools"
    )
    early_documents: int = Field(
        default=c.DEFAULT_EARLY_DOCUMENTS,
        ge=1,
        le=10_000,
        description="a larger run's first documents go to the workers while the rest is still being stored",
    )
    data_dir: Path = Field(
        default=Path(".pipeline"),
        description="the SQLite file, embedded Redis, logs and report files of `pipeline run`",
    )

    chunk_tokens: int = Field(
        default=c.DEFAULT_CHUNK_TOKENS, ge=200, description="largest chunk, in estimated tokens"
    )
    model_context_tokens: int = Field(
        default=c.DEFAULT_MODEL_CONTEXT_TOKENS,
        ge=1000,
        description=f"the extraction model's context window: chunks are at most this less "
        f"{c.EXTRACT_PROMPT_RESERVE_TOKENS} tokens of prompt and PIPELINE_EXTRACT_MAX_TOKENS, and at "
        "most PIPELINE_CHUNK_TOKENS",
    )
    chunk_overlap_tokens: int = Field(
        default=c.DEFAULT_CHUNK_OVERLAP_TOKENS, ge=0, description="overlap between consecutive chunks"
    )
    extract_max_tokens: int = Field(
        default=c.DEFAULT_EXTRACT_MAX_TOKENS, ge=64, description="`max_tokens` of an extraction answer"
    )
    context_budget_tokens: int = Field(
        default=c.DEFAULT_CONTEXT_BUDGET_TOKENS,
        ge=500,
        description="prompt budget of one synthesis call; more summaries are synthesized in batches, "
        "recursively",
    )
    max_file_bytes: int = Field(
        default=c.DEFAULT_MAX_FILE_BYTES, ge=1, description="larger files are skipped with the reason"
    )
    follow_links: bool = Field(
        default=False,
        description="read a symbolic link under a submitted directory (submit, run, the nightly inbox) when "
        "it resolves under that directory; off: every link is skipped with the reason",
    )
    task_max_retries: int = Field(
        default=c.DEFAULT_TASK_MAX_RETRIES,
        ge=0,
        description="retries of a transient failure (its calls' own tries spent) within one delivery "
        "of a task, with capped, jittered backoff",
    )
    document_max_attempts: int = Field(
        default=c.DEFAULT_DOCUMENT_MAX_ATTEMPTS,
        ge=1,
        description="deliveries of one document that never finished (its worker died), across redeliveries and resumes, before it fails",
    )
    task_time_budget_s: float = Field(
        default=c.DEFAULT_TASK_TIME_BUDGET_S,
        gt=0,
        description="an extract task past this hands its document back to the queue (answers kept)",
    )
    lease_s: float = Field(
        default=c.DEFAULT_LEASE_S,
        ge=3,
        description="a running document's lease, renewed by its worker's heartbeat every third of it; "
        "live workers reclaim it this long after its worker died",
    )
    watchdog_idle_s: float = Field(
        default=c.DEFAULT_WATCHDOG_IDLE_S,
        gt=0,
        description="a run with no activity for this long is resumed by the watchdog",
    )
    outage_tolerance_s: float | None = Field(
        default=None,
        gt=0,
        description="a provider outage (the circuit open) shorter than this fails no document: its "
        "calls wait instead; unset: until the run's deadline, else 2 hours",
    )
    circuit_failures: int = Field(
        default=c.DEFAULT_CIRCUIT_FAILURES,
        ge=1,
        description="consecutive connection failures or 5xx answers of the LLM endpoint (over every "
        "worker) that open its circuit breaker: calls then wait, and one probe at a time tries again",
    )
    circuit_probe_s: float = Field(
        default=c.DEFAULT_CIRCUIT_PROBE_S,
        gt=0,
        description="an open circuit's first probe goes this long after it opened; the spacing "
        "doubles after each failed probe",
    )
    circuit_probe_max_s: float = Field(
        default=c.DEFAULT_CIRCUIT_PROBE_MAX_S,
        gt=0,
        description="the longest spacing between an open circuit's probes: work resumes within it "
        "of the provider's return",
    )
    retention_days: float | None = Field(
        default=None,
        gt=0,
        description="beat prunes runs older than this nightly (their filing texts, chunks and call "
        "rows; extractions, risk factors and reports stay); unset: nothing is deleted",
    )
    watchdog_max_resumes: int = Field(
        default=2, ge=0, description="resumes without progress before the watchdog marks a run stalled"
    )
    inbox: str | None = Field(
        default=None,
        description="directory or glob that beat submits nightly, new content only (a worker reads it: "
        "mount it there)",
    )
    inbox_schedule: str = Field(
        default="30 1 * * *",
        description="crontab expression (minute hour day month weekday) of the nightly submit, in "
        "beat's time zone (UTC)",
    )
    inbox_query: str | None = Field(default=None, description="the nightly run's report question")
    watchdog_interval_s: float = Field(default=300.0, gt=0, description="how often beat runs the watchdog")
    synthesis_copies: int = Field(
        default=2,
        ge=1,
        le=4,
        description="the final synthesis call goes this many times at once, the first answer is the report "
        "(a hedged request: one call more per run); 1 for a local server that answers one request at a time",
    )
    run_failure_threshold: float = Field(
        default=0.10,
        ge=0,
        le=1,
        description="a run whose share of failed documents exceeds this ends failed (report still written)",
    )
    wait_stuck_s: float = Field(
        default=180.0,
        gt=0,
        description="`--wait` gives up (exit 4, the run goes on) after a stuck state held this long "
        "without progress: no live worker, every call failing, a provider pause",
    )
    progress_interval_s: float = Field(
        default=30.0, gt=0, description="off a terminal, `--wait` prints a progress line this often"
    )

    # The global rate limit, shared by every worker through Redis (0: no limit of that kind).
    rate_limit_rpm: int = Field(
        default=0, ge=0, description="requests per window, per endpoint, model and API key (0: no limit)"
    )
    rate_limit_tpm: int = Field(
        default=0, ge=0, description="tokens per window, per endpoint, model and API key (0: no limit)"
    )
    max_inflight: int = Field(
        default=0,
        ge=0,
        description="LLM calls in flight at once, per endpoint, model and API key (0: no cap)",
    )
    rate_limit_window_s: float = Field(default=60.0, gt=0, description="the provider's window")
    rate_limit_margin_s: float = Field(
        default=c.DEFAULT_RATE_LIMIT_MARGIN_S,
        ge=0,
        description="added to the window: a call reaches the provider a little after we admit it",
    )
    limiter_redis_url: str | None = Field(
        default=None,
        description="where the rate limiter keeps its shared state (a Redis that several deployments "
        "sharing one API key can share); unset: PIPELINE_REDIS_URL",
    )
    limiter_max_wait_s: float = Field(
        default=c.DEFAULT_LIMITER_MAX_WAIT_S,
        ge=0,
        description="wait in place for the limiter up to this; longer waits requeue the task",
    )
    rate_limit_burst_s: float = Field(
        default=c.DEFAULT_RATE_LIMIT_BURST_S,
        ge=0,
        description="seconds of quota that may go at once; calls are otherwise spread at the quota's rate",
    )
    rate_limit_pacing: bool = Field(
        default=True, description="spread calls at the quota's rate (off: the sliding window alone)"
    )
    rate_limit_learn: bool = Field(
        default=True,
        description="the provider's x-ratelimit-limit-* headers set the limits (none configured) or lower them",
    )
    rate_limit_min_factor: float = Field(
        default=0.2, gt=0, le=1, description="floor of the cut to the paced rate after a 429"
    )
    rate_limit_recovery_s: float | None = Field(
        default=None, gt=0, description="time to climb back from a cut to the full rate (default: one window)"
    )

    # Cost: prices per model, a budget per run, size caps.
    llm_prices: str | None = Field(
        default=None,
        description="USD per million input/output tokens, e.g. 'gpt-4o-mini:0.15/0.60,gpt-4o:2.50/10'; "
        "unset: the shipped list prices (pipeline/core/prices.py), which these override per model",
    )
    run_budget_usd: float | None = Field(
        default=None,
        gt=0,
        description="a run's spending cap, fixed at submit: once spent, no new LLM call is made, its "
        "remaining documents fail with reason 'budget' and the report says so",
    )
    max_document_tokens: int = Field(
        default=0, ge=0, description="files estimated above this many tokens are skipped (0: no cap)"
    )
    max_run_tokens: int = Field(
        default=0, ge=0, description="a run takes files until their estimated tokens reach this (0: no cap)"
    )

    # Batch mode: the provider's Batch API at its discount, finished by a deadline.
    llm_mode: Literal["sync", "batch", "auto"] = Field(
        default="sync",
        description="sync: HTTP calls under the global limit; batch: the Batch API first, then sync what "
        "it has not answered in time; auto: batch when the deadline leaves room (`--mode`)",
    )
    run_deadline: str | None = Field(
        default=None,
        description="when the report must be there: a time of day (06:00, the next one, local time) or "
        "an ISO timestamp (`--deadline`)",
    )
    llm_batch_prices: str | None = Field(
        default=None,
        description="batch prices like PIPELINE_LLM_PRICES, per model; others: sync prices x the discount",
    )
    llm_batch_discount: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="batch price / sync price where no batch price is set (0.5: each provider's "
        "documented Batch discount)",
    )
    batch_max_requests: int = Field(
        default=50_000, ge=1, description="requests per input file (OpenAI: 50,000)"
    )
    batch_max_file_bytes: int = Field(
        default=200 * 1024 * 1024, ge=1024, description="bytes per input file (OpenAI: 200 MB)"
    )
    batch_max_enqueued_tokens: int = Field(
        default=0, ge=0, description="tokens a run keeps enqueued at the provider at once (0: no cap)"
    )
    batch_line_attempts: int = Field(
        default=2, ge=1, description="batches a chunk's request may go in before it goes synchronously"
    )
    batch_poll_s: float = Field(default=30.0, gt=0, description="how often a batch run's batches are polled")
    batch_deadline_margin_s: float = Field(
        default=300.0,
        ge=0,
        description="kept free before the deadline beyond the synchronous path's estimate",
    )
    batch_min_room_s: float = Field(
        default=1800.0,
        ge=0,
        description="auto: the least time a batch is given before the sync path must start",
    )
    batch_cancel_wait_s: float = Field(
        default=60.0, ge=0, description="at the cutover, how long to wait for cancelled batches' lines"
    )
    batch_keep_files: bool = Field(
        default=False,
        description="keep a batch's input, output and error files at the provider once it is ingested",
    )

    # Routing: weighted models for extraction, a fallback, several keys with their own limits.
    llm_models: str | None = Field(
        default=None, description="extract models with weights, e.g. 'gpt-4o-mini:80,gpt-4o:20'"
    )
    llm_fallback_model: str | None = Field(
        default=None,
        description="model used once a document has failed PIPELINE_LLM_FALLBACK_AFTER attempts",
    )
    llm_fallback_after: int = Field(default=2, ge=1, description="failed attempts before fallback")
    llm_api_keys: SecretStr | None = Field(
        default=None, description="several API keys, comma-separated, each with its own limits"
    )

    # Flower, the web monitor (`pipeline flower`): basic auth is required unless --unauthenticated.
    flower_user: str | None = Field(
        default=None,
        description="Flower basic-auth user name (`pipeline flower` refuses to start without one)",
    )
    flower_password: SecretStr | None = Field(default=None, description="Flower basic-auth password")
    flower_address: str = Field(default="127.0.0.1", description="interface Flower listens on")
    flower_port: int = Field(default=5555, ge=1, le=65535, description="port Flower listens on")
    task_events: bool = Field(
        default=False,
        description="workers send Celery task events (what Flower lists; a Redis publish each); "
        "`pipeline flower` turns them on in the running workers, `pipeline worker -E` from the start",
    )

    @field_validator(
        "database_url",
        "redis_url",
        "limiter_redis_url",
        "llm_base_url",
        "inbox",
        "flower_user",
        "flower_password",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("llm_prices", "llm_batch_prices")
    @classmethod
    def _prices_parse(cls, value: str | None) -> str | None:
        parse_prices(value)
        return value

    @field_validator("run_deadline")
    @classmethod
    def _deadline_parses(cls, value: str | None) -> str | None:
        if value and value.strip():
            parse_deadline(value)
            return value.strip()
        return None

    @field_validator("llm_models")
    @classmethod
    def _models_parse(cls, value: str | None) -> str | None:
        if value:
            parse_models(value)
        return value

    @field_validator("inbox_schedule")
    @classmethod
    def _five_cron_fields(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError(f"{value!r} is not a crontab expression of five fields")
        return value

    @field_validator("database_url")
    @classmethod
    def _normalise_postgres_url(cls, value: str | None) -> str | None:
        # Users paste libpq URLs; SQLAlchemy needs the driver named for psycopg 3.
        if value is None:
            return None
        for prefix in ("postgres://", "postgresql://"):
            if value.startswith(prefix):
                value = "postgresql+psycopg://" + value[len(prefix) :]
        _check_database_url(value)
        return value

    @field_validator("redis_url", "limiter_redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and urlsplit(value).scheme not in REDIS_SCHEMES:
            raise ValueError(
                f"PIPELINE_{str(info.field_name).upper()} is not a Redis URL: write it as "
                "redis://[:password@]host:6379/0 (rediss:// for TLS, unix:///path/to/socket)"
            )
        return value

    @field_validator("database_url", "redis_url", "limiter_redis_url")
    @classmethod
    def _no_placeholder_password(cls, value: str | None, info: ValidationInfo) -> str | None:
        for password in url_passwords(value or ""):
            if password.lower() in c.PLACEHOLDER_PASSWORDS:
                name = f"PIPELINE_{str(info.field_name).upper()}"
                raise ValueError(
                    f"{name} has the placeholder password {password}: replace it with "
                    f"{PASSWORD_OF[str(info.field_name)]}"
                )
        return value

    @field_validator("llm_base_url")
    @classmethod
    def _http_endpoint(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("http", "https"):
            raise ValueError(
                "PIPELINE_LLM_BASE_URL is not an HTTP URL: write it as https://host/v1 "
                "(the OpenAI-compatible API's base, e.g. https://api.openai.com/v1)"
            )
        return value

    def chunk_budget_tokens(self) -> int:
        """Chunk size: the model's context less the prompt and answer, at most chunk_tokens."""
        room = self.model_context_tokens - c.EXTRACT_PROMPT_RESERVE_TOKENS - self.extract_max_tokens
        return max(c.MIN_CHUNK_TOKENS, min(self.chunk_tokens, room))

    @property
    def resolved_database_url(self) -> str:
        """The database URL, with the embedded SQLite default filled in."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'pipeline.db').resolve()}"

    def api_key_value(self) -> str:
        """The API key to send; simulators and local gateways accept any non-empty key."""
        return self.llm_api_key.get_secret_value() if self.llm_api_key else "sk-no-key"

    def api_keys(self) -> list[str]:
        """Every configured key, in slot order (slot numbers are what the database records)."""
        if self.llm_api_keys:
            keys = [k.strip() for k in self.llm_api_keys.get_secret_value().split(",") if k.strip()]
            if keys:
                return keys
        return [self.api_key_value()]

    def prices(self) -> dict[str, Price]:
        """Sync prices: the shipped list prices, PIPELINE_LLM_PRICES over them per model."""
        return {**list_prices(), **parse_prices(self.llm_prices)}

    def batch_prices(self) -> dict[str, Price]:
        """Batch API prices: the sync prices x the discount, PIPELINE_LLM_BATCH_PRICES over them
        per model."""
        k = self.llm_batch_discount
        discounted = {
            m: Price(p.input_usd_per_m * k, p.output_usd_per_m * k) for m, p in self.prices().items()
        }
        return {**discounted, **parse_prices(self.llm_batch_prices)}

    def extract_models(self) -> list[tuple[str, float]]:
        """(model, weight) pairs for the extract stage; the configured model alone by default."""
        return parse_models(self.llm_models) if self.llm_models else [(self.llm_model, 1.0)]


def parse_models(text: str) -> list[tuple[str, float]]:
    """`PIPELINE_LLM_MODELS` ("model:weight,…") as (model, weight) pairs."""
    pairs: list[tuple[str, float]] = []
    for part in text.split(","):
        name, _, weight = part.strip().partition(":")
        try:
            value = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"PIPELINE_LLM_MODELS: weight of {name!r} is not a number") from None
        if not name or value < 0:
            raise ValueError(f"PIPELINE_LLM_MODELS: bad entry {part!r}")
        pairs.append((name, value))
    if not pairs or sum(w for _, w in pairs) <= 0:
        raise ValueError("PIPELINE_LLM_MODELS: no model with a positive weight")
    return pairs


REDIS_SCHEMES = ("redis", "rediss", "unix")

PASSWORD_OF = {
    "database_url": "the database's real password (under compose: POSTGRES_PASSWORD in .env)",
    "redis_url": "the Redis server's real password (under compose: REDIS_PASSWORD in .env)",
    "limiter_redis_url": "the real password of the limiter's Redis server",
}
"""The password a URL setting carries: what its placeholder refusal says to put there."""


def url_passwords(url: str) -> list[str]:
    """The passwords a database or Redis URL carries, decoded: in its user part
    (`scheme://user:password@host`) and in a `password=` query parameter (libpq, redis-py)."""
    parts = urlsplit(url)
    found = [unquote(parts.password)] if parts.password else []
    return found + [p for p in parse_qs(parts.query).get("password", []) if p]


def _check_database_url(value: str) -> None:
    """Raise ValueError (without echoing the URL: it may hold a password) unless SQLAlchemy can
    parse `value` and has its dialect."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    how = "write it as postgresql+psycopg://user:password@host:5432/name or sqlite:///path/to/file.db"
    try:
        url = make_url(value)
    except ArgumentError:
        raise ValueError(f"PIPELINE_DATABASE_URL is not a database URL: {how}") from None
    try:
        url.get_dialect()
    except NoSuchModuleError:
        raise ValueError(
            f"PIPELINE_DATABASE_URL names a database SQLAlchemy does not know ({url.drivername}): {how}"
        ) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()
