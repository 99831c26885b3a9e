"""The one place secrets are masked. Every way out of the pipeline goes through `redact`:

- log records, when they are made (`install_logging`, in every process the CLI or Celery starts);
- the pipeline's exceptions, when they are raised (`PipelineError`'s message);
- the database's error columns, when they are written (`pipeline.storage.columns.RedactedText`);
- Celery's results and events, before they reach Redis and Flower (`workers.backend`, `workers.events`);
- the CLI's error sentences (`pipeline.cli.base.fail`); status and reports read what was stored.

What is masked: the configured secrets wherever they appear (the LLM API keys, the passwords in
PIPELINE_DATABASE_URL, PIPELINE_REDIS_URL and PIPELINE_LIMITER_REDIS_URL, PIPELINE_FLOWER_PASSWORD),
whole or URL-quoted; and what a provider may echo of a key we do not know: the password of any
URL, `sk-…` and `gw-…` tokens, a `Bearer` token, the word after "API key provided:" or "api_key=".
A configured secret of fewer than MIN_SECRET_CHARS characters is not searched for (it would mask
every word that contains it).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from pipeline.core.settings import Settings, get_settings

MASK = "[redacted]"
MIN_SECRET_CHARS = 4
_CACHED_SETTINGS = 8

_KEY_SHAPED = re.compile(
    # a key by its provider's prefix: sk-..., sk-proj-..., gw-live-..., and OpenAI's masked sk-abc***wxyz
    r"(?<![A-Za-z0-9])(?:sk|gw)-[A-Za-z0-9_\-*.]{2,}[A-Za-z0-9_\-*]"
    # a bearer token, as an echoed Authorization header shows it
    r"|(?<=Bearer )[A-Za-z0-9._~+/\-]+=*"
    # the key a message names: "Incorrect API key provided: X", "api_key=X", "API key: X"
    r"|(?<=key provided: )[^\s'\",;)]*[^\s'\",;).]"
    r"|(?i:(?<=api[_ -]key[=:])|(?<=api[_ -]key: ))[^\s'\",;)\[]*[^\s'\",;).\[]",
)
_URL_PASSWORD = re.compile(r"(?<=://)([^\s/:@]*):[^\s/@]+@")


class _Secrets:
    """The configured secrets of one Settings object, as one pattern (longest first)."""

    def __init__(self, settings: Settings | None) -> None:
        found = set(_configured(settings)) if settings is not None else set()
        words = sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, words))) if words else None


def _configured(settings: Settings) -> Iterable[str]:
    yield from settings.api_keys()
    if settings.llm_api_key:
        yield settings.llm_api_key.get_secret_value()
    if settings.flower_password:
        yield settings.flower_password.get_secret_value()
    for url in (settings.database_url, settings.redis_url, settings.limiter_redis_url):
        password = _password(url)
        if password:
            yield from {password, unquote(password), quote(unquote(password), safe="")}


def _password(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).password
    except ValueError:  # a URL that does not parse: its settings validator says so
        return None


_cache: dict[int, tuple[Settings, _Secrets]] = {}
_cache_lock = threading.Lock()


def _secrets_of(settings: Settings) -> _Secrets:
    key = id(settings)
    with _cache_lock:
        held = _cache.get(key)
        if held is not None and held[0] is settings:
            return held[1]
    made = _Secrets(settings)
    with _cache_lock:
        while len(_cache) >= _CACHED_SETTINGS:
            _cache.pop(next(iter(_cache)))
        _cache[key] = (settings, made)  # held, so that its id is not reused while cached
    return made


def _process_settings() -> Settings | None:
    try:
        return get_settings()
    except Exception:  # settings that do not validate: the command refuses to start, and says why
        return None


def redact(text: str, settings: Settings | None = None) -> str:
    """`text` without the process's configured secrets (and those of `settings`, when given),
    URL passwords or key-shaped words: each becomes MASK."""
    if not text:
        return text
    for source in (_process_settings(), settings):
        if source is not None and (pattern := _secrets_of(source).pattern) is not None:
            text = pattern.sub(MASK, text)
    text = _URL_PASSWORD.sub(rf"\1:{MASK}@", text)
    return _KEY_SHAPED.sub(MASK, text)


def redact_data(value: Any) -> Any:
    """`value` with every string inside it (dict keys and values, list and tuple items) redacted;
    other values as they are."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_data(k): redact_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_data(v) for v in value)
    return value


_busy = threading.local()
_FORMATTER = logging.Formatter()


def _redacted(record: logging.LogRecord) -> logging.LogRecord:
    if getattr(_busy, "on", False):  # a record logged while redacting (reading the settings)
        return record
    _busy.on = True
    try:
        record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(_FORMATTER.formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
    except Exception:  # a message that does not format: logging reports it when it is handled
        pass
    finally:
        _busy.on = False
    return record


def install_logging() -> None:
    """From now on every log record of this process is redacted as it is made: its message (with
    its arguments), its traceback and its stack, whatever logger, handler or formatter then
    writes it. Safe to call again."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "redacts", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return _redacted(previous(*args, **kwargs))

    marked: Callable[..., logging.LogRecord] = factory
    marked.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(marked)
