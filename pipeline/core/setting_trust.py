"""The settings of confidence per field (a group of `Settings`, as in
`pipeline.core.setting_groups`): a second answer for a sample, a stronger model for the doubtful."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings


class TrustSettings(BaseSettings):
    """Confidence per field: a second answer for a sample, and a stronger model for the doubtful."""

    heading: ClassVar[str] = "Confidence, verification and escalation"

    escalate_model: str | None = Field(
        default=None,
        description="a stronger model: each field scoring under PIPELINE_ESCALATE_BELOW is asked "
        "again of it, with the chunk that states it, and the better-grounded answer kept (unset: none)",
    )
    escalate_below: float = Field(
        default=0.5, ge=0, le=1, description="the confidence under which a field is escalated"
    )
    escalate_fields: str = Field(
        default="company,fiscal_year,revenue_usd",
        description="the fields escalation may ask again, comma-separated, of company, fiscal_year, "
        "revenue_usd and risk_factors (a filing's risks span many chunks: escalating them costs more)",
    )
    escalate_base_url: str | None = Field(
        default=None,
        description="the escalation model's endpoint, when it is not PIPELINE_LLM_BASE_URL's "
        "(its calls then pass a limiter and a circuit breaker of that endpoint's own)",
    )
    escalate_api_key: SecretStr | None = Field(
        default=None, description="that endpoint's API key (unset: PIPELINE_LLM_API_KEY)"
    )
    llm_logprobs: bool = Field(
        default=False,
        description="ask extraction calls for token log-probabilities (`logprobs: true`) and use "
        "the probability of each field's tokens in its confidence (servers that refuse the "
        "parameter refuse the call: leave it off for them)",
    )
    verify_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="share of documents whose chunks are answered twice (by the escalation model "
        "when set, else the same model); agreement is a signal of each field's confidence",
    )
