"""Fixed values and names, with their units in their names (settings' defaults are written in
`pipeline.core.setting_groups`, once)."""

PROMPT_VERSION = "extract-v6"
"""Bump when a prompt changes: stored answers are keyed on it. This is the cached layout's
(PIPELINE_PROMPT_LAYOUT=cached: instructions and a guide to the form, then the filing's context,
then the chunk; issue 50; v5: the schema only in response_format where the mode carries it; v6:
a guide where worked examples were, which small models copied)."""
COMPACT_PROMPT_VERSION = "extract-v3"
"""The compact layout's (PIPELINE_PROMPT_LAYOUT=compact: the prompt as it was before issue 50,
byte for byte), so that its stored answers stay reusable."""
CACHED_LAYOUT_BREAK_EVEN = 0.8
"""The cached-input discount (1 - cached-input price / input price) above which the cached
layout costs less per filing than the compact one: its extra prompt tokens per call over the
tokens it is served from the cache (`pipeline.extraction.layout_choice.break_even_discount`
counts it from the layout, 0.807 in o200k_base; tests/test_prompt_layout.py keeps the two
within 0.03). PIPELINE_PROMPT_LAYOUT=auto takes the cached layout above it."""
PROMPT_VERSIONS = {"cached": PROMPT_VERSION, "compact": COMPACT_PROMPT_VERSION}
"""A run's prompt version (`runs.prompt_version`) by its layout: the workers ask in the layout
of the version the run was submitted with."""

SIMULATED_MODEL = "sim-1"

CHARS_PER_TOKEN = 4
"""Conservative estimate for English filing text when no tokenizer is known."""

EXTRACT_PROMPT_RESERVE_TOKENS = 600
"""The extraction prompt's instructions, section hint and JSON schema, around the chunk (the
compact layout)."""
CACHED_PROMPT_RESERVE_TOKENS = 2_000
"""The same in the cached layout: its instructions, guide and schema (~1,100 tokens),
the filing's context (at most ~600) and the schema again in `response_format`."""
MIN_CHUNK_TOKENS = 400
DEFAULT_COMPRESS_MAX_TOKENS = 300
DEFAULT_SYNTHESIZE_MAX_TOKENS = 1_200
MAX_RISK_FACTORS_PER_DOCUMENT = 12

TASK_SOFT_TIME_LIMIT_S = 2 * 60 * 60
TASK_HARD_TIME_LIMIT_S = 2 * 60 * 60 + 15 * 60
"""Celery's own limits, enforced by the prefork pool only (threads cannot be interrupted);
both below the visibility timeout so a task is never redelivered while it still runs."""
RETRY_BASE_DELAY_S = 2.0
RETRY_MAX_DELAY_S = 120.0

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
PAUSE_WITHOUT_RETRY_AFTER_S = 1.0
"""Shared pause after a 429 that named no wait."""

VISIBILITY_TIMEOUT_S = 3 * 60 * 60
"""Broker redelivery timeout for unacked tasks: above the longest task including waits."""

EXTRACT_QUEUE = "extract"
REPORT_QUEUE = "report"

UNSET_OUTAGE_TOLERANCE_S = 2 * 60 * 60
"""With PIPELINE_OUTAGE_TOLERANCE_S unset and no run deadline: an outage this long fails the
documents still waiting for it (a provider's bad hour is waited out, a dead endpoint is not)."""

PLACEHOLDER_PASSWORDS = frozenset({"change-me", "changeme", "change_me", "changethis", "password", "secret"})
"""Refused as passwords (compared without case): `.env.example`'s placeholder and its like. The
Redis and database URLs are checked when the settings are read, Flower's login when it starts."""

RATE_LIMIT_MARGIN_S = 0.25
"""Our window is the provider's plus this: a call admitted at t reaches the provider a little
later, by a delay that varies, so a slot freed at exactly t + window could still be counted in
the provider's window. Paced at limit per (window + margin), any 60 s of arrivals holds
limit x 60 / 60.25 plus the one call the pacing may let in early, plus those the delay moved in:
at 2,400,000 TPM and calls of 7,500 tokens, 2,397,500 with one call of jitter. Costs 0.4 % of a
60 s window's throughput (0.5 s cost 0.8 %: R1t, docs/benchmarks.md). Was a setting until
issue 31."""
RATE_LIMIT_MIN_FACTOR = 0.2
"""The floor of the cut to the paced rate after a burst of 429s (a fifth of the quota)."""
BATCH_MAX_FILE_BYTES = 200 * 1024 * 1024
"""A Batch API input file's size limit (OpenAI: 200 MB)."""
