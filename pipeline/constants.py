"""Defaults and fixed names, with their units in their names."""

PROMPT_VERSION = "extract-v1"
"""Bump when a prompt changes: stored answers are keyed on it."""

DEFAULT_MODEL = "gpt-4o-mini"
SIMULATED_MODEL = "sim-1"

CHARS_PER_TOKEN = 4
"""Conservative estimate for English filing text when no tokenizer is known."""

DEFAULT_CHUNK_TOKENS = 6_000
DEFAULT_CHUNK_OVERLAP_TOKENS = 200
DEFAULT_EXTRACT_MAX_TOKENS = 1_500
DEFAULT_COMPRESS_MAX_TOKENS = 300
DEFAULT_SYNTHESIZE_MAX_TOKENS = 1_200
DEFAULT_CONTEXT_BUDGET_TOKENS = 12_000
MAX_RISK_FACTORS_PER_DOCUMENT = 12

DEFAULT_MAX_FILE_BYTES = 8 * 1024 * 1024
DEFAULT_LLM_TIMEOUT_S = 120.0
DEFAULT_TASK_MAX_RETRIES = 8
RETRY_BASE_DELAY_S = 2.0
RETRY_MAX_DELAY_S = 120.0

VISIBILITY_TIMEOUT_S = 3 * 60 * 60
"""Broker redelivery timeout for unacked tasks: above the longest task including waits."""

EXTRACT_QUEUE = "extract"
REPORT_QUEUE = "report"
