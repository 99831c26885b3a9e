"""Reading a structured answer as real models write it, not only as a strict parser wants it.

Small models under a grammar write raw control characters inside strings, one list item that
breaks the schema (an empty quote), an absurd figure (revenue of 1.4e46 dollars), or stop at
`max_tokens` mid-item. None of these should cost the whole answer: control characters are
escaped, an invalid list item is dropped and an invalid nullable field nulled (and said so),
and a cut-off answer keeps its complete items. What cannot be mended is handed back with the
validation error, for the client's one repair.

`read` never raises, whatever the text (tests/test_fuzz_model_text.py): a lone surrogate, which a
provider's JSON can carry (`"\\ud800"` in its body decodes to one) and no UTF-8 encoder takes,
is read as U+FFFD.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, get_args, get_origin

import pydantic_core
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_DROPPED = 5
"""More invalid items than this and the answer is not mended but repaired. The repair's answer is
the last: its valid items are kept however many are dropped (a small model blanked eight titles of
a 450 KB filing's chunk, and the chunk failed the whole document)."""


@dataclass(frozen=True)
class Reading(Generic[M]):
    value: M | None
    error: ValidationError | None = None
    """Why no value (the strict parse's error when nothing parsed)."""
    notes: list[str] = field(default_factory=list)
    """What was mended, for the call's record."""


def read(
    content: str, schema: type[M], finish_reason: str = "stop", max_dropped: int | None = MAX_DROPPED
) -> Reading[M]:
    """`content` validated against `schema`, mended where it can be: at most `max_dropped`
    invalid items dropped (None: any number, for the last answer there will be). Never raises:
    what cannot be read is a Reading without a value, with the validation error."""
    notes: list[str] = []
    if _LONE_SURROGATE.search(content):
        content = _LONE_SURROGATE.sub("\ufffd", content)
        notes.append("lone surrogates read as U+FFFD")
    try:
        return Reading(schema.model_validate_json(content), notes=notes)
    except ValidationError as exc:
        strict_error = exc
    text = escape_control_characters(content)
    if text != content:
        notes.append("control characters inside strings escaped")
    cut = finish_reason == "length"
    try:
        data = pydantic_core.from_json(text, allow_partial=cut)
    except ValueError:
        return Reading(None, strict_error)
    if cut:
        notes.append("cut off at max_tokens: the complete items kept")
        _fill_missing(data, schema)
    dropped = 0
    while True:
        try:
            return Reading(schema.model_validate(data), notes=notes)
        except ValidationError as exc:
            removed = _drop_invalid(data, exc, schema)
            dropped += len(removed)
            if not removed or (max_dropped is not None and dropped > max_dropped):
                return Reading(None, exc)
            notes.extend(removed)


def combine(kept: M, rest: M) -> M:
    """The items kept from a cut-off answer with those of the answer asked for after it: lists
    joined without repeats, other fields as kept unless the cut left them empty."""
    first, second = kept.model_dump(), rest.model_dump()
    joined: dict[str, Any] = {}
    for name, value in first.items():
        more = second.get(name)
        if isinstance(value, list) and isinstance(more, list):
            joined[name] = value + [item for item in more if item not in value]
        else:
            joined[name] = more if value in (None, "", []) else value
    try:
        return type(kept).model_validate(joined)
    except ValidationError:
        return kept


def escape_control_characters(text: str) -> str:
    """`text` with raw control characters inside JSON strings written as escapes (outside
    strings, newlines and tabs are whitespace and stay)."""
    out: list[str] = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            elif ord(char) < 0x20:
                out.append(f"\\u{ord(char):04x}")
                continue
        elif char == '"':
            in_string = True
        out.append(char)
    return "".join(out)


def _drop_invalid(data: Any, exc: ValidationError, schema: type[BaseModel]) -> list[str]:
    """Remove the list items the errors point into, and null the nullable fields they name, when
    every error points at one of those; returns what was dropped and why (nothing when an error
    lies elsewhere)."""
    if not isinstance(data, dict):
        return []
    doomed: dict[str, set[int]] = {}
    nulled: set[str] = set()
    reasons: list[str] = []
    for error in exc.errors():
        loc = error["loc"]
        if (
            len(loc) == 1
            and isinstance(loc[0], str)
            and _nullable(schema, loc[0])
            and data.get(loc[0]) is not None
        ):
            nulled.add(loc[0])
        elif (
            len(loc) >= 2
            and isinstance(loc[0], str)
            and isinstance(loc[1], int)
            and isinstance(data.get(loc[0]), list)
        ):
            doomed.setdefault(loc[0], set()).add(loc[1])
        else:
            return []
        where = ".".join(str(part) for part in loc)
        reasons.append(f"dropped {where}: {error['msg']}")
    for name, indexes in doomed.items():
        data[name] = [item for i, item in enumerate(data[name]) if i not in indexes]
    for name in nulled:
        data[name] = None
    return reasons


def _fill_missing(data: Any, schema: type[BaseModel]) -> None:
    """The fields a cut left out: lists empty, nullable fields null (required ones stay out)."""
    if not isinstance(data, dict):
        return
    for name, info in schema.model_fields.items():
        if name in data:
            continue
        if get_origin(info.annotation) is list:
            data[name] = []
        elif _nullable(schema, name):
            data[name] = None


def _nullable(schema: type[BaseModel], name: str) -> bool:
    field = schema.model_fields.get(name)
    return field is not None and type(None) in get_args(field.annotation)
