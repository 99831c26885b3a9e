"""The structured output asked of the model, validated with pydantic.

Every field is required (nullable where a chunk may not hold it) and extra keys are
forbidden, so the JSON schema is accepted by OpenAI's strict `json_schema` mode as is.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

MIN_FISCAL_YEAR = 1950
MAX_FISCAL_YEAR = 2100
MAX_REVENUE_USD = 1e13
"""Ten trillion dollars: no company's annual revenue comes near (a small model wrote 1.4e46)."""


class RiskFactor(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str
    quote: str

    @field_validator("title", "quote")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must not be empty")
        return value


class FilingExtraction(BaseModel):
    """What one chunk, and after merging one whole filing, says."""

    model_config = ConfigDict(extra="forbid")

    company: str | None
    fiscal_year: int | None
    revenue_usd: float | None
    revenue_quote: str | None
    risk_factors: list[RiskFactor]

    @field_validator("company")
    @classmethod
    def _strip_company(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @field_validator("fiscal_year")
    @classmethod
    def _plausible_year(cls, value: int | None) -> int | None:
        if value is not None and not MIN_FISCAL_YEAR <= value <= MAX_FISCAL_YEAR:
            raise ValueError(f"fiscal year {value} is outside {MIN_FISCAL_YEAR}..{MAX_FISCAL_YEAR}")
        return value

    @field_validator("revenue_usd")
    @classmethod
    def _non_negative(cls, value: float | None) -> float | None:
        if value is not None and value < 0:
            raise ValueError("revenue cannot be negative")
        if value is not None and value > MAX_REVENUE_USD:
            raise ValueError(f"revenue {value:.3g} is above {MAX_REVENUE_USD:.0e} USD, no company's")
        return value
