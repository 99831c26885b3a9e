"""One settings class for every process: environment (prefix PIPELINE_) and `.env`.

Its fields are declared by group in `pipeline.core.setting_groups`; what spans groups (the
checks of a value, what is derived from several) is here."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import AliasChoices, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.core import constants as c
from pipeline.core.cost import Price, parse_prices
from pipeline.core.cron import crontab_problem
from pipeline.core.deadline import parse_deadline
from pipeline.core.prices import list_prices
from pipeline.core.setting_groups import (
    BatchSettings,
    FlowerSettings,
    LimitSettings,
    LLMSettings,
    NightlySettings,
    RunSettings,
    StorageSettings,
    WorkerSettings,
)
from pipeline.core.setting_input import InputSettings
from pipeline.core.setting_trust import TrustSettings


class Settings(
    FlowerSettings,
    NightlySettings,
    RunSettings,
    BatchSettings,
    WorkerSettings,
    LimitSettings,
    InputSettings,
    TrustSettings,
    LLMSettings,
    StorageSettings,
):
    """Configuration. Unset URLs mean the embedded defaults (`pipeline run`)."""

    model_config = SettingsConfigDict(
        env_prefix="PIPELINE_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
        hide_input_in_errors=True,  # a refused URL's password stays out of the message
    )

    @field_validator(
        "database_url",
        "redis_url",
        "limiter_redis_url",
        "llm_base_url",
        "escalate_base_url",
        "escalate_model",
        "inbox",
        "flower_user",
        "flower_password",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("llm_prices")
    @classmethod
    def _prices_parse(cls, value: str | None) -> str | None:
        parse_prices(value)
        return value

    @field_validator("llm_batch_prices")
    @classmethod
    def _batch_prices_parse(cls, value: str | None) -> str | None:
        parse_prices(value, "PIPELINE_LLM_BATCH_PRICES")
        return value

    @field_validator("escalate_fields")
    @classmethod
    def _known_fields(cls, value: str) -> str:
        known = ("company", "fiscal_year", "revenue_usd", "risk_factors")
        unknown = [f for f in (part.strip() for part in value.split(",")) if f and f not in known]
        if unknown:
            raise ValueError(
                f"PIPELINE_ESCALATE_FIELDS: unknown fields {', '.join(unknown)} (known: {', '.join(known)})"
            )
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
    def _crontab_beat_reads(cls, value: str) -> str:
        if problem := crontab_problem(value):
            raise ValueError(problem)
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

    @field_validator("llm_base_url", "escalate_base_url")
    @classmethod
    def _http_endpoint(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and urlsplit(value).scheme not in ("http", "https"):
            name = (
                "PIPELINE_ESCALATE_BASE_URL"
                if info.field_name == "escalate_base_url"
                else "PIPELINE_LLM_BASE_URL"
            )
            raise ValueError(
                f"{name} is not an HTTP URL: write it as https://host/v1 "
                "(the OpenAI-compatible API's base, e.g. https://api.openai.com/v1)"
            )
        return value

    def chunk_budget_tokens(self) -> int:
        """Chunk size: the model's context less the prompt (of the layout) and answer, at most
        chunk_tokens. Raises ConfigError when the cached layout leaves no room for a chunk; under
        `auto` a context too small for it takes the compact layout's."""
        cached = self.prompt_layout == "cached" or (
            self.prompt_layout == "auto" and self.fits_cached_layout()
        )
        reserve = c.CACHED_PROMPT_RESERVE_TOKENS if cached else c.EXTRACT_PROMPT_RESERVE_TOKENS
        room = self.model_context_tokens - reserve - self.extract_max_tokens
        if cached and room < c.MIN_CHUNK_TOKENS:
            from pipeline.core.errors import ConfigError  # errors reads the settings (redaction)

            raise ConfigError(
                f"PIPELINE_MODEL_CONTEXT_TOKENS={self.model_context_tokens} leaves {room} tokens for a "
                f"chunk beside the cached layout's prompt (~{c.CACHED_PROMPT_RESERVE_TOKENS:,}) and "
                "PIPELINE_EXTRACT_MAX_TOKENS: set PIPELINE_PROMPT_LAYOUT=compact for a small context"
            )
        return max(c.MIN_CHUNK_TOKENS, min(self.chunk_tokens, room))

    def fits_cached_layout(self) -> bool:
        """Whether the model's context holds the cached layout's prompt, an answer and a chunk."""
        room = self.model_context_tokens - c.CACHED_PROMPT_RESERVE_TOKENS - self.extract_max_tokens
        return room >= c.MIN_CHUNK_TOKENS

    def prompt_version(self) -> str:
        """The prompt version a run submitted now is asked in (its layout's, `chosen_layout`)."""
        return c.PROMPT_VERSIONS[self.chosen_layout()[0]]

    def chosen_layout(self) -> tuple[str, str]:
        """(cached or compact, why in one line): PIPELINE_PROMPT_LAYOUT, or under `auto` the
        cached layout where the model's cached-input discount (`prices`: the table and
        PIPELINE_LLM_PRICES) is over c.CACHED_LAYOUT_BREAK_EVEN and its context holds it."""
        if self.prompt_layout != "auto":
            return self.prompt_layout, f"layout: {self.prompt_layout} (PIPELINE_PROMPT_LAYOUT)"
        model, needed = self.llm_model, round(c.CACHED_LAYOUT_BREAK_EVEN * 100)
        if not self.fits_cached_layout():
            return (
                "compact",
                "layout: compact, because PIPELINE_MODEL_CONTEXT_TOKENS is too small for the cached one",
            )
        price = self.prices().get(model)
        if price is None or price.cached_input_usd_per_m is None or price.input_usd_per_m <= 0:
            return "compact", f"layout: compact, because {model} has no cached-input price"
        off = 1 - price.cached_input_usd_per_m / price.input_usd_per_m
        if off > c.CACHED_LAYOUT_BREAK_EVEN:
            return (
                "cached",
                f"layout: cached, because {model}'s cached input is {off * 100:.0f} % off (it pays above {needed} %)",
            )
        return (
            "compact",
            f"layout: compact, because {model}'s cached input is only {off * 100:.0f} % off "
            f"(the cached layout pays above {needed} %)",
        )

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
        discounted = {m: p.scaled(self.llm_batch_discount) for m, p in self.prices().items()}
        return {**discounted, **parse_prices(self.llm_batch_prices, "PIPELINE_LLM_BATCH_PRICES")}

    def escalation_endpoint(self) -> Settings | None:
        """The settings of the escalation model's own endpoint (PIPELINE_ESCALATE_BASE_URL);
        None when it shares PIPELINE_LLM_BASE_URL's, or no escalation model is set."""
        if not (self.escalate_model and self.escalate_base_url):
            return None
        update: dict[str, Any] = {
            "llm_base_url": self.escalate_base_url,
            "llm_model": self.escalate_model,
            "llm_models": None,
            "llm_fallback_model": None,
        }
        if self.escalate_api_key:
            update.update(llm_api_key=self.escalate_api_key, llm_api_keys=None)
        return self.model_copy(update=update)

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


GROUPS: tuple[type[BaseSettings], ...] = (
    StorageSettings,
    LLMSettings,
    TrustSettings,
    InputSettings,
    LimitSettings,
    WorkerSettings,
    BatchSettings,
    RunSettings,
    NightlySettings,
    FlowerSettings,
)
"""The groups in the order the configuration reference lists them."""


def default(name: str) -> Any:
    """A setting's default, as its group declares it (the one place it is written): for code
    that needs it without a `Settings` (a constructor's default, a test's expectation)."""
    return Settings.model_fields[name].get_default(call_default_factory=True)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()


REMOVED: dict[str, str] = {
    "PIPELINE_RATE_LIMIT_MARGIN_S": "the limiter adds 0.25 s to the provider's window (issue 31)",
    "PIPELINE_RATE_LIMIT_MIN_FACTOR": "a cut after 429s goes no lower than a fifth of the quota (issue 31)",
    "PIPELINE_RATE_LIMIT_RECOVERY_S": "the rate climbs back from a cut within one window, "
    "PIPELINE_RATE_LIMIT_WINDOW_S (issue 31)",
    "PIPELINE_BATCH_MAX_FILE_BYTES": "batch input files are cut at the provider's 200 MB (issue 31)",
}
"""Variables earlier versions read, and what became of each: named when a process finds one set."""

NOT_SETTINGS_PREFIX = "PIPELINE_TEST_"
"""The test suite's own variables (which Postgres and Redis it uses), read by no process."""

DEPLOYMENT_VARIABLES = frozenset({"PIPELINE_DB_WAIT_TRIES", "PIPELINE_DB_WAIT_DELAY_S", "PIPELINE_IMAGE_TAG"})
"""Read by the deployment files (ops/prestart.sh, docker-compose.yml), not by a setting."""


def variable_names() -> set[str]:
    """Every environment name a setting is read from (PIPELINE_ + its name, or its aliases)."""
    names: set[str] = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names.update(str(choice).upper() for choice in alias.choices)
        else:
            names.add(f"PIPELINE_{name}".upper())
    return names


def unread_variables(variables: Iterable[str]) -> list[str]:
    """A sentence for each PIPELINE_ variable among `variables` that no setting reads: a removed
    one says what replaced it, a misspelt one the setting it is closest to. A variable that is
    set and silently ignored is a setting the operator believes in and the process never used."""
    known = variable_names()
    said = []
    for variable in sorted({v.upper() for v in variables}):
        if not variable.startswith("PIPELINE_") or variable in known:
            continue
        if variable.startswith(NOT_SETTINGS_PREFIX) or variable in DEPLOYMENT_VARIABLES:
            continue
        if variable in REMOVED:
            said.append(f"{variable} is no longer read: {REMOVED[variable]}")
            continue
        close = difflib.get_close_matches(variable, sorted(known), n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        said.append(f"{variable} is not a setting and is ignored{hint}")
    return said
