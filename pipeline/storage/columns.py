"""Column types of the models."""

from __future__ import annotations

from sqlalchemy import Text, TypeDecorator
from sqlalchemy.engine import Dialect

from pipeline.core.redaction import redact


class RedactedText(TypeDecorator[str]):
    """Text that never holds a secret: every value written passes through
    `pipeline.core.redaction` (an error column may quote a provider's refusal, which may quote the
    API key), then is cut to `max_chars` (0: whole). The column itself is plain TEXT."""

    impl = Text
    cache_ok = True

    def __init__(self, max_chars: int = 0) -> None:
        super().__init__()
        self.max_chars = max_chars

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        cleaned = redact(value)
        return cleaned[: self.max_chars] if self.max_chars else cleaned
