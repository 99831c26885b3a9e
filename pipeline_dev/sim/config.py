"""The simulator's knobs: latency, provider limits and fault rates."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline_dev.sim.bill import parse_prices
from pipeline_dev.sim.outage import kind_of


@dataclass(frozen=True)
class SimConfig:
    """How the simulated provider behaves. Rates are shares of requests in [0, 1].

    error_rate, drop_rate and hang_rate split one draw per admitted request, so their
    shares add up (capped at 1); bad_json_rate and truncate_rate apply to the answers
    that remain.
    """

    p50_s: float = 0.05
    p95_s: float = 0.2
    seed: int | None = None
    rpm: int = 0
    tpm: int = 0
    window_s: float = 60.0  # the provider's sliding window; shorter windows make tests quick
    quantize: bool = True  # also enforce limit/window per second, as providers do
    error_rate: float = 0.0
    drop_rate: float = 0.0
    hang_rate: float = 0.0
    hang_s: float = 600.0
    bad_json_rate: float = 0.0
    truncate_rate: float = 0.0
    ungrounded_rate: float = 0.0  # share of quotes replaced by text not in the document
    wrong_figure_rate: float = 0.0
    """Share of money figures (a field named for revenue, sales, income...) changed, their quote
    kept: a misread figure, as small models make them (x10, /10, +25 %, -25 %)."""
    made_up_rate: float = 0.0
    """Share of quoted items (a risk factor, the revenue with its quote) made up whole: the quote
    invented, a title beside it replaced, a figure beside it misread."""
    faithful_models: tuple[str, ...] = ()
    """Models answered without the three faults above: a stronger model to escalate to, answering
    from the document as it stands."""
    cache_answers: bool = False
    """Keep each composed answer and give it again to the same request: the bench's overhead
    regime runs its filings twice and times the second run, whose answers then cost no CPU."""
    record_path: str | None = None
    rejected_shapes: tuple[str, ...] = ()
    """Request shapes answered with an error naming response_format, as servers without them do
    (json_schema, json_object_schema, json_object)."""
    rejected_status: int = 500
    """The status of that error: 500 as llama-cpp-python answers json_schema, or 400/422."""
    api_key: str | None = None
    """When set, any other key is refused with 401 (invalid_api_key), as providers do."""
    echo_key: bool = False
    """Every error answered quotes the request's API key whole, a 401 included (OpenAI masks it),
    and so do a batch's errors and error-file lines (the key that created the batch)."""
    served_models: tuple[str, ...] = ()
    """When set, any other model is refused with 404 (model_not_found)."""
    context_tokens: int = 0
    """When set, prompt + max_tokens above it is refused with 400 (context_length_exceeded)."""
    unsupported_params: tuple[str, ...] = ()
    """Request parameters refused with 400 (unsupported_parameter), e.g. temperature on some models."""
    batch_duration_s: float = 2.0
    """How long a batch is in_progress: its lines complete one by one, spread evenly over it (so a
    cancel or an expiry halfway finds about half of them done)."""
    batch_validate_s: float = 0.2
    """How long a batch is validating; finalizing and cancelling take as long."""
    batch_fail_rate: float = 0.0
    """Share of batch lines answered with a 500 (written to the batch's error file)."""
    batch_expire_after_s: float = 86_400.0
    """The completion window as the simulator enforces it: a batch not finished this long after its
    creation expires (OpenAI's "24h")."""
    batch_enqueued_tokens: int = 0
    """The organization's enqueued-token limit: prompt tokens + max_tokens of the lines of every
    batch not yet finished; a batch that would pass it fails (token_limit_exceeded). 0 = none."""
    outage_after_s: float = 0.0
    outage_for_s: float = 0.0
    """An outage (`pipeline_dev.sim.outage`) this long, beginning this long after the start: every
    chat completion refused (0: none; POST /sim/outage starts one while the simulator runs)."""
    outage_kind: str = "503"
    """How the outage refuses: 503 (overloaded), 500, or reset (the connection dropped)."""
    flex_slowdown: float = 3.0
    """Flex processing (`service_tier: "flex"`): answers this many times slower than the
    standard tier (OpenAI's flex guide: slower responses; raise the timeout to 15 minutes)."""
    flex_unavailable_rate: float = 0.0
    """Share of flex requests refused with 429 "Resource Unavailable" (not charged, nothing
    counted against the quota), as the guide says flex does when capacity is short."""
    prompt_cache_ttl_s: float = 300.0
    """How long a cached prompt prefix stays after its last use (OpenAI's prompt-caching guide:
    5 to 10 minutes of inactivity); 0: nothing is cached (`pipeline_dev.sim.prompt_cache`)."""
    reject_prompt_cache_key: bool = False
    """A request with `prompt_cache_key` is refused with 400 "Unrecognized request argument
    supplied", as servers that check their parameters strictly (Azure OpenAI) answer one they do
    not know; by default it is accepted (and, as at OpenAI, only steers routing)."""
    prices: str = ""
    """`model:input/output[/cached],…` in USD per million tokens (PIPELINE_LLM_PRICES's form):
    what GET /sim/bill prices the usage it served with (`pipeline_dev.sim.bill`)."""

    def adversarial(self, model: str) -> tuple[float, float, float]:
        """(ungrounded_rate, wrong_figure_rate, made_up_rate) for an answer of `model`."""
        if model in self.faithful_models:
            return 0.0, 0.0, 0.0
        return self.ungrounded_rate, self.wrong_figure_rate, self.made_up_rate

    def __post_init__(self) -> None:
        if self.p50_s < 0 or self.p95_s < 0 or self.hang_s < 0:
            raise ValueError("latencies must be >= 0")
        if self.window_s <= 0:
            raise ValueError("window_s must be > 0")
        if self.rpm < 0 or self.tpm < 0:
            raise ValueError("rpm and tpm must be >= 0 (0 = no limit)")
        if self.batch_duration_s < 0 or self.batch_validate_s < 0:
            raise ValueError("batch_duration_s and batch_validate_s must be >= 0")
        if self.batch_expire_after_s <= 0:
            raise ValueError("batch_expire_after_s must be > 0")
        if self.outage_after_s < 0 or self.outage_for_s < 0:
            raise ValueError("outage_after_s and outage_for_s must be >= 0")
        kind_of(self.outage_kind)
        parse_prices(self.prices)
        if self.prompt_cache_ttl_s < 0:
            raise ValueError("prompt_cache_ttl_s must be >= 0 (0 = no caching)")
        if self.flex_slowdown < 1:
            raise ValueError(f"flex_slowdown must be >= 1, got {self.flex_slowdown}")
        if self.batch_enqueued_tokens < 0:
            raise ValueError("batch_enqueued_tokens must be >= 0 (0 = no limit)")
        for name in (
            "batch_fail_rate",
            "error_rate",
            "drop_rate",
            "hang_rate",
            "bad_json_rate",
            "truncate_rate",
            "ungrounded_rate",
            "wrong_figure_rate",
            "made_up_rate",
            "flex_unavailable_rate",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
