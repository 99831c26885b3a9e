"""Defaults and fixed names, with their units in their names."""

PROMPT_VERSION = "extract-v3"
"""Bump when a prompt changes: stored answers are keyed on it."""

DEFAULT_MODEL = "gpt-4o-mini"
SIMULATED_MODEL = "sim-1"

CHARS_PER_TOKEN = 4
"""Conservative estimate for English filing text when no tokenizer is known."""

DEFAULT_CHUNK_TOKENS = 6_000
DEFAULT_CHUNK_OVERLAP_TOKENS = 200
DEFAULT_MODEL_CONTEXT_TOKENS = 128_000
EXTRACT_PROMPT_RESERVE_TOKENS = 600
"""The extraction prompt's instructions, section hint and JSON schema, around the chunk."""
MIN_CHUNK_TOKENS = 400
DEFAULT_EXTRACT_MAX_TOKENS = 1_500
DEFAULT_COMPRESS_MAX_TOKENS = 300
DEFAULT_SYNTHESIZE_MAX_TOKENS = 1_200
DEFAULT_CONTEXT_BUDGET_TOKENS = 12_000
MAX_RISK_FACTORS_PER_DOCUMENT = 12

DEFAULT_MAX_FILE_BYTES = 8 * 1024 * 1024
DEFAULT_LLM_TIMEOUT_S = 60.0
DEFAULT_TASK_MAX_RETRIES = 8
DEFAULT_DOCUMENT_MAX_ATTEMPTS = 5
DEFAULT_TASK_TIME_BUDGET_S = 3600.0
"""Checked between chunks: a task past it requeues itself, keeping its answered chunks. Far
below the visibility timeout, with room for the chunk in progress (its calls time out)."""
TASK_SOFT_TIME_LIMIT_S = 2 * 60 * 60
TASK_HARD_TIME_LIMIT_S = 2 * 60 * 60 + 15 * 60
"""Celery's own limits, enforced by the prefork pool only (threads cannot be interrupted);
both below the visibility timeout so a task is never redelivered while it still runs."""
DEFAULT_WATCHDOG_IDLE_S = 1800.0
RETRY_BASE_DELAY_S = 2.0
RETRY_MAX_DELAY_S = 120.0

DEFAULT_LIMITER_MAX_WAIT_S = 30.0
DEFAULT_RATE_LIMIT_MARGIN_S = 0.25
"""Our window is the provider's plus this: a call admitted at t reaches the provider a little
later, by a delay that varies, so a slot freed at exactly t + window could still be counted
in the provider's window. Paced at limit per (window + margin), any 60 s of arrivals holds
limit x 60 / 60.25 plus the one call the pacing may let in early, plus those the delay
moved in: at 2,400,000 TPM and calls of 7,500 tokens, 2,397,500 with one call of jitter.
Costs 0.4 % of a 60 s window's throughput (0.5 s cost 0.8 %: R1t, README)."""
DEFAULT_RATE_LIMIT_BURST_S = 0.0
"""Seconds of quota that may go at once. Providers enforce a per-minute quota per second as
well (OpenAI: 60,000 requests/minute may be enforced as 1,000/second), so a second that starts
with a burst and then carries the paced rate holds more than its share: 0 paces every call."""
LIMITER_LEARNED_TTL_MS = 10 * 60 * 1000
"""What the provider's headers said is kept this long after the last answer that said it."""
LIMITER_PROBE_MS = 3_000
"""With no limits configured or learned, the first call of a scope goes alone for this long at
most, waiting for an answer's x-ratelimit-* headers: a worker killed mid-probe (or a slow
answer) then holds the others back 3 s, not the probe's whole in-flight lease."""
REDIS_TIMEOUT_S = 5.0
"""Connect and read timeout of every Redis client of ours (the limiter, heartbeats, locks), with
TCP keepalive: no command of ours blocks on the server, so a silent peer (a failover, a NAT that
dropped the connection) is an error within seconds, retried as any Redis outage, instead of a
thread blocked for good while the heartbeat renews its lease."""
REDIS_CLIENT_OPTIONS = {
    "socket_timeout": REDIS_TIMEOUT_S,
    "socket_connect_timeout": REDIS_TIMEOUT_S,
    "socket_keepalive": True,
}
CALL_HELD = "circuit_open"
"""llm_calls.status of a call the endpoint's open circuit held (`pipeline.llm.circuit`): never
sent. The client writes it; the totals and the report's timeline count it apart."""
LIMITER_LEASE_EXTRA_S = 30.0
"""An in-flight lease outlives the call's timeout by this much, then expires by itself."""
LIMITER_KEY_TTL_EXTRA_MS = 60_000
LIMITER_INFLIGHT_POLL_S = 0.05
CONSERVATIVE_CHARS_PER_TOKEN = 3
"""For rate-limit reservations without a tokenizer: over-estimating is the safe side."""
AIMD_DECREASE = 0.8
"""After a 429 whose headers say the provider's window is spent: our limit is too high (another
client shares the key, or the provider lowered it). The rate is back within about one window."""
AIMD_BURST_DECREASE = 0.95
"""After a 429 while the provider's window still had room: a second's share was exceeded because
calls bunched on their way (delivery jitter), not because the rate is wrong; 5 % of slack."""
AIMD_COOLDOWN_MS = 5_000
"""One cut per congestion event: 429s within this time of a cut do not cut again."""
DEFAULT_PAUSE_S = 1.0
"""Shared pause after a 429 that named no wait."""

VISIBILITY_TIMEOUT_S = 3 * 60 * 60
"""Broker redelivery timeout for unacked tasks: above the longest task including waits."""

EXTRACT_QUEUE = "extract"
REPORT_QUEUE = "report"

DEFAULT_EARLY_DOCUMENTS = 32
"""A run's first documents sent while the rest is stored: their chunks (several each, answered
side by side) keep two workers of 32 threads busy for the seconds that storing hundreds of
filings takes, and storing fewer first starts the calls sooner."""

DEFAULT_LEASE_S = 30.0
"""A running document's lease: its worker's heartbeat renews it every third of this, and a live
worker reclaims it within about a third more after the lease ran out (under 60 s in all)."""

DEFAULT_CIRCUIT_FAILURES = 5
"""Consecutive connection failures or 5xx answers of an endpoint, counted over every worker,
that open its circuit breaker. An answer (any but a 429) resets the count, so a stray 5xx
amid answers never opens it, while a provider down for everyone is left alone after a handful
of calls instead of one round of retries per thread."""
DEFAULT_CIRCUIT_PROBE_S = 2.0
DEFAULT_CIRCUIT_PROBE_MAX_S = 30.0
"""An open circuit's probes: the first this long after it opened, the spacing doubling after
each failed probe up to DEFAULT_CIRCUIT_PROBE_MAX_S (2, 4, 8, 16, 30, 30 ... s: a 5 minute
outage is probed 13 times, and work resumes within 30 s of the provider's return)."""
DEFAULT_OUTAGE_TOLERANCE_S = 2 * 60 * 60
"""With PIPELINE_OUTAGE_TOLERANCE_S unset and no run deadline: an outage this long fails the
documents still waiting for it (a provider's bad hour is waited out, a dead endpoint is not)."""

PLACEHOLDER_PASSWORDS = frozenset({"change-me", "changeme", "change_me", "changethis", "password", "secret"})
"""Refused as passwords (compared without case): `.env.example`'s placeholder and its like. The
Redis and database URLs are checked when the settings are read, Flower's login when it starts."""
