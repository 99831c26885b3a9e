"""Redis replies as Python values: one place that knows bytes, None and the Lua integer rules.

redis-py answers bytes (or str with `decode_responses`), and nil as None; a Lua script's numbers
come back as integers (Lua floats are truncated), so scripts return fractions scaled (`* 1e6`).
"""

from __future__ import annotations

from typing import Any


def text(value: Any, default: str = "") -> str:
    """A reply as a string (None: `default`)."""
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def integer(value: Any, default: int = 0) -> int:
    """A reply as an integer (None or empty: `default`)."""
    if value is None or value == b"" or value == "":
        return default
    return int(value)


def number(value: Any) -> float | None:
    """A reply as a float (None: absent)."""
    if value is None or value == b"" or value == "":
        return None
    return float(value)


def flag(value: Any) -> bool:
    """A script's 0/1 as a bool."""
    return bool(integer(value))


def millionths(value: Any) -> float:
    """A fraction a script returned scaled by 1e6 (Lua numbers come back as integers)."""
    return integer(value) / 1e6


def time_ms(reply: Any) -> int:
    """Redis TIME ([seconds, microseconds]) in milliseconds."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def fields(raw: dict[Any, Any]) -> dict[str, str]:
    """An HGETALL reply with its names and values as strings."""
    return {text(k): text(v) for k, v in raw.items()}
