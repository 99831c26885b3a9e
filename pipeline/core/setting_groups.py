"""The settings in groups, one class each: `Settings` (pipeline.core.settings) is all of them.

Each group is a mixin of the one flat `Settings`, so every setting keeps its environment name
(PIPELINE_ + the field's name) and its attribute (`settings.lease_s`), and the configuration
reference (docs/configuration.md) has a section per group. A default is written here, once:
code that needs one without a `Settings` asks `settings.default(name)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings


class StorageSettings(BaseSettings):
    """Where state is kept: the database, the broker, local files."""

    heading: ClassVar[str] = "Storage"

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL (postgresql://... is used with psycopg 3); unset: a SQLite file in "
        "the data directory, for `pipeline run`, `status` and `report` only (`worker`, `submit`, "
        "`resume` and `watchdog` refuse to start without it)",
    )
    db_pool_size: int = Field(
        default=6,
        ge=1,
        le=200,
        description="Postgres connections one process holds at most, whatever its threads (they wait "
        "on the LLM holding none): ten workers at the default fit a server of max_connections 100 "
        "with room for other clients; `pipeline worker` says what the deployment needs",
    )
    db_pool_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="a thread waits this long for one of its process's connections, then its step "
        "fails with an error naming PIPELINE_DB_POOL_SIZE (a task retries it)",
    )
    db_transaction_pooler: bool = Field(
        default=False,
        description="PIPELINE_DATABASE_URL reaches a pooler in transaction mode (PgBouncer "
        "pool_mode = transaction): no prepared statements, no session options at connect (the "
        "timeouts go on the database role: docs/operations.md)",
    )
    redis_url: str | None = Field(
        default=None,
        description="broker and result backend, redis:// or rediss://; unset: an embedded Redis "
        "(`pipeline run` only)",
    )
    data_dir: Path = Field(
        default=Path(".pipeline"),
        description="the SQLite file, embedded Redis, logs and report files of `pipeline run`",
    )
    retention_days: float | None = Field(
        default=None,
        gt=0,
        description="beat prunes runs older than this nightly (their filing texts, chunks and call "
        "rows; extractions, risk factors and reports stay); unset: nothing is deleted",
    )


class LLMSettings(BaseSettings):
    """The LLM endpoint: where calls go, with which keys and models, at which prices."""

    heading: ClassVar[str] = "The LLM endpoint"

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
    llm_api_keys: SecretStr | None = Field(
        default=None, description="several API keys, comma-separated, each with its own limits"
    )
    llm_model: str = Field(default="gpt-4o-mini", description="model name sent to the endpoint")

    llm_models: str | None = Field(
        default=None, description="extract models with weights, e.g. 'gpt-4o-mini:80,gpt-4o:20'"
    )
    llm_fallback_model: str | None = Field(
        default=None,
        description="model used once a document has failed PIPELINE_LLM_FALLBACK_AFTER attempts",
    )
    llm_fallback_after: int = Field(default=2, ge=1, description="failed attempts before fallback")

    llm_timeout_s: float = Field(default=60.0, gt=0, description="timeout of one LLM call")

    llm_structured_output: Literal["auto", "json_schema", "json_object_schema", "json_object", "prompt"] = (
        Field(
            default="auto",
            description="how extraction asks for JSON; auto: json_schema, one step down each time the "
            "endpoint rejects the request's shape (kept in Redis for every worker)",
        )
    )
    llm_prices: str | None = Field(
        default=None,
        description="USD per million input/output[/cached input] tokens, e.g. "
        "'gpt-4o-mini:0.15/0.60/0.075,gpt-4o:2.50/10'; without a cached price, cached tokens cost the "
        "input price; unset: the shipped list prices (pipeline/core/prices.py), which these override per model",
    )


class LimitSettings(BaseSettings):
    """The global rate limit, shared by every worker through Redis (0: no limit of that kind)."""

    heading: ClassVar[str] = "Rate limits"

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

    rate_limit_burst_s: float = Field(
        default=0.0,
        ge=0,
        description="seconds of quota that may go at once; calls are otherwise spread at the quota's rate",
    )
    """Seconds of quota that may go at once. Providers enforce a per-minute quota per second as
    well (OpenAI: 60,000 requests/minute may be enforced as 1,000/second), so a second that starts
    with a burst and then carries the paced rate holds more than its share: 0 paces every call."""

    rate_limit_pacing: bool = Field(
        default=True, description="spread calls at the quota's rate (off: the sliding window alone)"
    )
    rate_limit_learn: bool = Field(
        default=True,
        description="the provider's x-ratelimit-limit-* headers set the limits (none configured) or lower them",
    )
    limiter_redis_url: str | None = Field(
        default=None,
        description="where the rate limiter keeps its shared state (a Redis that several deployments "
        "sharing one API key can share); unset: PIPELINE_REDIS_URL",
    )
    limiter_max_wait_s: float = Field(
        default=30.0,
        ge=0,
        description="wait in place for the limiter up to this; longer waits requeue the task",
    )


class WorkerSettings(BaseSettings):
    """Workers: their threads, retries, leases and the circuit breaker."""

    heading: ClassVar[str] = "Workers, retries and leases"

    worker_concurrency: int = Field(
        default=8,
        ge=1,
        le=512,
        description="threads per worker process (and its HTTP pool size; its database connections are PIPELINE_DB_POOL_SIZE)",
    )
    worker_pool: Literal["threads", "prefork", "solo"] = Field(
        default="threads", description="set by `pipeline worker --pool`: sizes the per-process pools"
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="worker logs: text with run/document ids, or JSON lines"
    )
    task_max_retries: int = Field(
        default=8,
        ge=0,
        description="retries of a transient failure (its calls' own tries spent) within one delivery "
        "of a task, with capped, jittered backoff",
    )
    document_max_attempts: int = Field(
        default=5,
        ge=1,
        description="deliveries of one document that never finished (its worker died), across redeliveries and resumes, before it fails",
    )
    task_time_budget_s: float = Field(
        default=3600.0,
        gt=0,
        description="an extract task past this hands its document back to the queue (answers kept)",
    )
    """Checked between chunks: a task past it requeues itself, keeping its answered chunks. Far
    below the visibility timeout, with room for the chunk in progress (its calls time out)."""

    lease_s: float = Field(
        default=30.0,
        ge=3,
        description="a running document's lease, renewed by its worker's heartbeat every third of it; "
        "live workers reclaim it this long after its worker died",
    )
    """A running document's lease: its worker's heartbeat renews it every third of this, and a live
    worker reclaims it within about a third more after the lease ran out (under 60 s in all)."""

    outage_tolerance_s: float | None = Field(
        default=None,
        gt=0,
        description="a provider outage (the circuit open) shorter than this fails no document: its "
        "calls wait instead; unset: until the run's deadline, else 2 hours",
    )
    circuit_failures: int = Field(
        default=5,
        ge=1,
        description="consecutive connection failures or 5xx answers of the LLM endpoint (over every "
        "worker) that open its circuit breaker: calls then wait, and one probe at a time tries again",
    )
    """Consecutive connection failures or 5xx answers of an endpoint, counted over every worker,
    that open its circuit breaker. An answer (any but a 429) to a call sent after the latest
    failure resets the count, so a stray 5xx amid answers never opens it, while a provider down
    for everyone is left alone after a handful of calls instead of one round of retries per
    thread."""

    circuit_probe_s: float = Field(
        default=2.0,
        gt=0,
        description="an open circuit's first probe goes this long after it opened; the spacing "
        "doubles after each failed probe",
    )
    circuit_probe_max_s: float = Field(
        default=30.0,
        gt=0,
        description="the longest spacing between an open circuit's probes: work resumes within it "
        "of the provider's return",
    )
    """An open circuit's probes: the first this long after it opened, the spacing doubling after
    each failed probe up to this (2, 4, 8, 16, 30, 30 ... s: a 5 minute
    outage is probed 13 times, and work resumes within 30 s of the provider's return)."""


class BatchSettings(BaseSettings):
    """Modes and deadlines: the provider's Batch API at its discount, finished by a deadline."""

    heading: ClassVar[str] = "Modes and deadlines"

    llm_mode: Literal["sync", "flex", "batch", "auto"] = Field(
        default="sync",
        description="sync: HTTP calls under the global limit; flex: the same calls at flex processing's "
        "tier (batch prices, slower, refused when short of capacity); batch: the Batch API first, then "
        "sync what it has not answered in time; auto: batch when the deadline leaves room (`--mode`)",
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
    flex_slowdown: float = Field(
        default=2.0,
        ge=1,
        description="how many times longer the planner assumes flex processing takes than the standard "
        "tier (auto's deadline plan, `pipeline plan`)",
    )
    batch_cancel_wait_s: float = Field(
        default=60.0, ge=0, description="at the cutover, how long to wait for cancelled batches' lines"
    )
    batch_keep_files: bool = Field(
        default=False,
        description="keep a batch's input, output and error files at the provider once it is ingested",
    )


class RunSettings(BaseSettings):
    """A run's budget, its verdict, its report and how `--wait` follows it."""

    heading: ClassVar[str] = "Runs and reports"

    run_budget_usd: float | None = Field(
        default=None,
        gt=0,
        description="a run's spending cap, fixed at submit: each call holds its largest cost against it "
        "first and is not made when that would not fit; the documents then left fail with reason "
        "'budget' (an escalation not made leaves the first answer) and the report says so",
    )
    plan_history_runs: int = Field(
        default=5,
        ge=1,
        description="the last completed sync runs of the model, in the prompt layout the run takes, "
        "whose usage scales `pipeline plan`'s estimates (and the one a run keeps at submit); fewer "
        "follow a changed corpus sooner",
    )
    run_failure_threshold: float = Field(
        default=0.10,
        ge=0,
        le=1,
        description="a run whose share of failed documents exceeds this ends failed (report still written)",
    )
    context_budget_tokens: int = Field(
        default=12_000,
        ge=500,
        description="prompt budget of one synthesis call; more summaries are synthesized in batches, "
        "recursively",
    )
    synthesis_copies: int = Field(
        default=2,
        ge=1,
        le=4,
        description="the final synthesis call goes this many times at once, the first answer is the report "
        "(a hedged request: one call more per run); 1 for a local server that answers one request at a time",
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


class NightlySettings(BaseSettings):
    """The nightly schedule (beat): the inbox, the watchdog."""

    heading: ClassVar[str] = "Nightly"

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

    watchdog_idle_s: float = Field(
        default=1800.0,
        gt=0,
        description="a run with no activity for this long is resumed by the watchdog",
    )
    watchdog_max_resumes: int = Field(
        default=2, ge=0, description="resumes without progress before the watchdog marks a run stalled"
    )


class FlowerSettings(BaseSettings):
    """Flower, the web monitor (`pipeline flower`): basic auth is required unless --unauthenticated."""

    heading: ClassVar[str] = "Flower"

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
