"""What a model said, fitted to the columns it is written to.

An answer is validated against our schema (pydantic), not against the table: a `company` longer
than its VARCHAR(300), a NUL character (no Postgres text or JSONB value may hold one) or a NaN in
JSON (JSONB has none) passes validation and then fails the write, after every chunk of the
document was paid for, as an error no retry mends. Every write of an answer's values goes
through `fitted` first: strings cut to their column's length (read from the model's column
types, never repeated here), NULs removed from every string, inside JSON too (keys as well), and
floats that are not finite written as null. SQLite would take all of these; fitting there too
keeps what the two databases hold the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from sqlalchemy import JSON, Float, String

from pipeline.storage.models import Base, table_of

NUL = "\x00"


def fitted(model: type[Base], row: Mapping[str, Any]) -> dict[str, Any]:
    """`row` (column name -> value) with each value fitted to its column of `model`'s table."""
    rules = _rules(model)
    return {name: rules[name](value) if name in rules else value for name, value in row.items()}


def json_safe(value: Any) -> Any:
    """`value` (what `model_dump(mode="json")` gives) as JSONB takes it: NULs removed from
    strings and keys, non-finite floats as None."""
    if isinstance(value, str):
        return value.replace(NUL, "") if NUL in value else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {json_safe(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


@lru_cache(maxsize=32)
def _rules(model: type[Base]) -> dict[str, Callable[[Any], Any]]:
    """How each column of `model` that can refuse a value is fitted (built once per model)."""
    rules: dict[str, Callable[[Any], Any]] = {}
    for column in table_of(model).columns:
        kind = column.type
        if isinstance(kind, String):  # Text is a String without a length
            rules[column.name] = _text_rule(kind.length)
        elif isinstance(kind, JSON):
            rules[column.name] = json_safe
        elif isinstance(kind, Float):
            rules[column.name] = _finite
    return rules


def _text_rule(length: int | None) -> Callable[[Any], Any]:
    def fit(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if NUL in value:
            value = value.replace(NUL, "")
        return value[:length] if length is not None and len(value) > length else value

    return fit


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value
