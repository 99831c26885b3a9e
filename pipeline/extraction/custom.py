"""Extraction with a schema of the user's (`submit --schema module:Model`), pure parts.

The default 10-K schema has SQL fact tables (`extractions` columns, `risk_factors`); a custom
pydantic model's answers are stored as JSON (`extractions.data`). Chunk answers are merged
generically, and grounding still applies: every string in a field whose name contains
"quote" is looked up in the filing, with the results in `data["_grounding"]` and the counts
in `extractions.quotes_total` / `quotes_grounded`.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from pipeline.extraction.grounding import Source

GROUNDING_KEY = "_grounding"


@lru_cache(maxsize=32)
def load_schema(spec: str) -> type[BaseModel]:
    """The pydantic model named `module:Model`; ValueError saying why it cannot be used."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"--schema {spec!r}: expected module:Model, e.g. mypackage.schemas:Filing")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--schema {spec!r}: cannot import {module_name}: {exc}") from None
    model = getattr(module, name, None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ValueError(f"--schema {spec!r}: {name} in {module_name} is not a pydantic model")
    try:
        model.model_json_schema()
    except Exception as exc:  # pydantic raises several kinds for unsupported field types
        raise ValueError(f"--schema {spec!r}: no JSON schema: {exc}") from None
    return model


def merge(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One answer from the chunks' answers, in document order: objects merged key by key, the
    first non-null scalar kept, lists concatenated without repeats."""
    merged: dict[str, Any] = {}
    for part in parts:
        merged = _merge_value(merged, part)
    return merged


def _merge_value(old: Any, new: Any) -> Any:
    if old is None:
        return new
    if isinstance(old, dict) and isinstance(new, dict):
        out = dict(old)
        for key, value in new.items():
            out[key] = _merge_value(out.get(key), value)
        return out
    if isinstance(old, list) and isinstance(new, list):
        seen = {json.dumps(item, sort_keys=True) for item in old}
        out_list = list(old)
        for item in new:
            key = json.dumps(item, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out_list.append(item)
        return out_list
    return old


def ground(data: dict[str, Any], source: Source) -> tuple[dict[str, Any], int, int]:
    """`data` with its quote checks under `_grounding` (path, grounded, start, end); the
    number of quotes and of those found."""
    checks: list[dict[str, Any]] = []

    def walk(value: Any, path: str, quote_field: bool) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else key, "quote" in key.lower())
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]", quote_field)
        elif quote_field and isinstance(value, str) and value.strip():
            match = source.find(value)
            checks.append(
                {
                    "path": path,
                    "grounded": match is not None,
                    "start": match.start if match else None,
                    "end": match.end if match else None,
                }
            )

    walk(data, "", False)
    grounded = sum(1 for c in checks if c["grounded"])
    return {**data, GROUNDING_KEY: checks}, len(checks), grounded


def without_ungrounded(data: dict[str, Any]) -> dict[str, Any]:
    """What a summary may state as fact: `data` with every ungrounded quote set to None."""
    bad = {c["path"] for c in data.get(GROUNDING_KEY, []) if not c["grounded"]}

    def walk(value: Any, path: str) -> Any:
        if path in bad:
            return None
        if isinstance(value, dict):
            return {
                key: walk(item, f"{path}.{key}" if path else key)
                for key, item in value.items()
                if key != GROUNDING_KEY
            }
        if isinstance(value, list):
            return [walk(item, f"{path}[{index}]") for index, item in enumerate(value)]
        return value

    result: dict[str, Any] = walk(data, "")
    return result
