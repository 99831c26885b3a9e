"""Flower, the web monitor of workers and tasks: its options, built from the settings.

Pure (no Celery, no Flower imported): `pipeline flower` starts Flower with these. The password
reaches Flower through its `FLOWER_BASIC_AUTH` environment variable, set in Flower's own
process, never on a command line (which `ps` shows to every user) or in a log.

Flower 2 exempts `/healthcheck` and `/metrics` (Prometheus) from authentication by design;
every other page and the HTTP API need the credentials.
"""

from __future__ import annotations

from pipeline.core.constants import PLACEHOLDER_PASSWORDS
from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings

BASIC_AUTH_ENV = "FLOWER_BASIC_AUTH"
"""Flower reads `--basic_auth` from this variable: `user:password`, pairs split on commas."""

UNAUTHENTICATED_API_ENV = "FLOWER_UNAUTHENTICATED_API"
"""Flower's own switch to serve its HTTP API without authentication (off unless set)."""

METRICS_PATH = "/metrics"
HEALTHCHECK_PATH = "/healthcheck"


def basic_auth(settings: Settings, *, unauthenticated: bool) -> str | None:
    """Flower's `user:password` from the settings; None only when `unauthenticated` allows
    starting without credentials. Raises ConfigError saying what to set otherwise."""
    user = settings.flower_user
    password = settings.flower_password.get_secret_value() if settings.flower_password else None
    if unauthenticated:
        if user or password:
            raise ConfigError(
                "--unauthenticated, but PIPELINE_FLOWER_USER / PIPELINE_FLOWER_PASSWORD are set: "
                "drop the flag to use them, or unset them"
            )
        return None
    missing = [name for name, value in (("USER", user), ("PASSWORD", password)) if not value]
    if missing:
        names = " and ".join(f"PIPELINE_FLOWER_{m}" for m in missing)
        raise ConfigError(
            f"Flower needs basic auth: set {names} (or pass --unauthenticated to start it open to "
            "anyone who can reach its port)"
        )
    assert user and password
    # Flower splits FLOWER_BASIC_AUTH on commas and compares "user:password" as one string.
    if ":" in user or "," in user:
        raise ConfigError("PIPELINE_FLOWER_USER must not contain ':' or ','")
    if "," in password:
        raise ConfigError("PIPELINE_FLOWER_PASSWORD must not contain ','")
    if password.lower() in PLACEHOLDER_PASSWORDS:
        raise ConfigError("PIPELINE_FLOWER_PASSWORD is a placeholder: choose a real password")
    return f"{user}:{password}"


def flower_argv(address: str, port: int) -> list[str]:
    """The `celery flower` arguments: where to listen. Credentials never go here."""
    return ["flower", f"--address={address}", f"--port={port}"]
