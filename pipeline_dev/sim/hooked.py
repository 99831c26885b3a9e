"""What the `[[sim:...]]` hooks do to an answer (pure): as small models write answers, and as a
database refuses them."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

LONG_STRING_CHARS = 400
"""What `[[sim:longstring]]` stretches the answer's first string field to (a VARCHAR(300) is
shorter)."""


def _change_one_item(instance: Any, change: Callable[[str], str]) -> Any:
    """`instance` with `change` applied to the first string of the first list of objects."""
    if isinstance(instance, dict):
        for value in instance.values():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                for key, item in value[0].items():
                    if isinstance(item, str):
                        value[0] = {**value[0], key: change(item)}
                        return instance
    return instance


def blank_one_item(instance: Any) -> Any:
    """`instance` with one string of the first list of objects emptied (a schema that wants it
    non-empty then refuses that item alone)."""
    return _change_one_item(instance, lambda _: "")


def nul_in_one_item(instance: Any) -> Any:
    """`instance` with a NUL character inside the first string of the first list of objects."""
    return _change_one_item(instance, lambda item: f"{item[:1]}\x00{item[1:]}")


def lengthen_first_string(instance: Any) -> Any:
    """`instance` with its first top-level string repeated to `LONG_STRING_CHARS` characters."""
    if isinstance(instance, dict):
        for key, value in instance.items():
            if isinstance(value, str) and value:
                repeats = LONG_STRING_CHARS // len(value) + 1
                return {**instance, key: " ".join([value] * repeats)[:LONG_STRING_CHARS]}
    return instance


def raw_newline_in_a_string(content: str) -> str:
    """JSON `content` with its first escaped newline, or else its first string value, holding a
    raw newline and tab instead (what strict JSON parsers refuse)."""
    if "\\n" in content:
        return content.replace("\\n", "\n\t", 1)
    return re.sub(r'(:\s*"[^"\\]{2})', lambda m: m.group(1) + "\n\t", content, count=1)
