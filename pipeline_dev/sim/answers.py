"""Pure answer building: a JSON-schema instance made from a document's own text.

Deterministic: the same document and schema always give the same answer. Values are
only ever taken from the document (never from instructions around it); quotes are
verbatim substrings of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pipeline_dev.sim import finders
from pipeline_dev.sim.text import Doc, Sentence, analyze
from pipeline_dev.sim.ungrounded import is_quote_field

MAX_ITEMS = 5
MAX_DEPTH = 6
_PERCENT_WORDS = ("percent", "pct", "rate", "margin", "growth", "ratio")
_COMPANY_WORDS = ("company", "registrant", "issuer", "filer", "entity")
_LONG_TEXT_WORDS = ("description", "summary", "text", "detail", "details", "explanation")
_MONTHS = "january february march april may june july august september october november december"
_DATE = re.compile(r"\b(" + "|".join(_MONTHS.split()) + r")\s+(\d{1,2}),\s+(\d{4})\b", re.I)

Schema = dict[str, Any]


@dataclass
class _Ctx:
    doc: Doc
    root: Schema
    focus: Sentence | None = None  # the sentence an array item is built around
    depth: int = 0  # object nesting: bounds recursive schemas (a node with child nodes)
    sources: dict[str, Sentence] = field(default_factory=dict)  # topic -> sentence used


def resolve(schema: Any, root: Schema) -> tuple[Schema, bool]:
    """The concrete (non-null) schema behind `$ref`/`anyOf`/`allOf`, and whether null is allowed."""
    nullable = False
    for _ in range(32):  # bounded: a `$ref` cycle must not hang the server
        if not isinstance(schema, dict):
            return {}, nullable
        if "$ref" in schema:
            target: Any = root
            for part in str(schema["$ref"]).lstrip("#/").split("/"):
                target = target.get(part, {}) if isinstance(target, dict) else {}
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        elif "anyOf" in schema or "oneOf" in schema:
            branches = schema.get("anyOf") or schema.get("oneOf") or []
            concrete = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
            nullable = nullable or len(concrete) < len(branches)
            rest = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
            schema = {**rest, **concrete[0]} if concrete else {"type": "null"}
        elif "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                merged.update(part if isinstance(part, dict) else {})
            schema = merged
        else:
            break
    kind = schema.get("type")
    if isinstance(kind, list):
        nullable = nullable or "null" in kind
        others = [k for k in kind if k != "null"]
        schema = {**schema, "type": others[0] if others else "null"}
    if "enum" in schema and None in schema["enum"]:
        nullable = True
    return schema, nullable


def schema_type(schema: Schema) -> str:
    """The JSON type a resolved schema asks for, inferred when `type` is missing."""
    if isinstance(schema.get("type"), str):
        return str(schema["type"])
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    if schema.get("enum"):
        return {bool: "boolean", int: "integer", float: "number"}.get(type(schema["enum"][0]), "string")
    return "string"


def build_json_answer(schema: Schema, document: str) -> Any:
    """An instance of `schema` (a JSON schema) filled from `document`'s text."""
    return _fill(schema, "", _Ctx(analyze(document), schema))


def _fill(schema: Any, name: str, ctx: _Ctx) -> Any:
    concrete, nullable = resolve(schema, ctx.root)
    if "const" in concrete:
        return concrete["const"]
    if "enum" in concrete:
        options = [o for o in concrete["enum"] if o is not None]
        for option in options:
            if re.search(rf"\b{re.escape(str(option).lower())}\b", ctx.doc.lower):
                return option
        return options[0] if options else None
    kind = schema_type(concrete)
    if kind == "null":
        return None
    if kind == "object":
        if ctx.depth >= MAX_DEPTH and nullable:
            return None
        ctx.depth += 1
        try:
            return _fill_object(concrete, ctx)
        finally:
            ctx.depth -= 1
    if kind == "array":
        return _fill_array(concrete, name, ctx) if ctx.depth < MAX_DEPTH else []
    if kind == "boolean":
        topic = finders.topic_tokens(name)
        return bool(topic) and all(t in ctx.doc.lower for t in topic)
    value: Any = None
    if kind in ("integer", "number"):
        value = _fill_number(concrete, name, ctx)
    elif kind == "string":
        value = _fill_string(concrete, name, ctx, nullable)
    if value is None and not nullable:
        value = _fallback(kind, concrete, ctx)
    if isinstance(value, str) and isinstance(concrete.get("maxLength"), int):
        value = value[: concrete["maxLength"]]  # a prefix of a quote is still verbatim
    return value


def _fill_object(schema: Schema, ctx: _Ctx) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties") or {}
    values: dict[str, Any] = {}
    # Quotes last: "revenue_quote" cites the sentence "revenue_usd" was read from.
    ordered = sorted(properties, key=lambda key: _is_quote(key))
    for key in ordered:
        values[key] = _fill(properties[key], key, ctx)
    return {key: values[key] for key in properties}


def _fill_array(schema: Schema, name: str, ctx: _Ctx) -> list[Any]:
    items, _ = resolve(schema.get("items", {}), ctx.root)
    limit = min(MAX_ITEMS, int(schema.get("maxItems", MAX_ITEMS)))
    kind = schema_type(items)
    topic = finders.topic_tokens(name)
    if kind == "object":
        # The item's own field names say what to look for too (e.g. "risk" in "risk_title").
        for key in items.get("properties") or {}:
            topic += [t for t in finders.topic_tokens(key) if t not in topic]
    if kind not in ("object", "string") or not topic:
        return []
    found: list[Any] = []
    for sentence in finders.relevant_sentences(ctx.doc, topic, limit):
        if kind == "string":
            found.append(sentence.text)
            continue
        item_ctx = _Ctx(ctx.doc, ctx.root, focus=sentence, depth=ctx.depth)
        found.append(_fill(items, name, item_ctx))
    return found


def _is_quote(name: str) -> bool:
    return is_quote_field(name)


def _fill_string(schema: Schema, name: str, ctx: _Ctx, nullable: bool) -> str | None:
    tokens = finders.name_tokens(name)
    topic = finders.topic_tokens(name)
    if schema.get("format") == "date":
        match = _DATE.search(ctx.doc.text)
        if match:
            month = _MONTHS.split().index(match.group(1).lower()) + 1
            return f"{match.group(3)}-{month:02d}-{int(match.group(2)):02d}"
        return None
    if _is_quote(name):
        return _quote(topic, ctx, nullable)
    if ctx.focus is not None:
        if any(word in tokens for word in _LONG_TEXT_WORDS):
            return ctx.focus.text
        header = finders.find_header(ctx.doc, name) if topic else None
        return header or ctx.focus.title or finders.first_words(ctx.focus.text)
    header = finders.find_header(ctx.doc, name)
    if header:
        return header
    if nullable:
        return None
    if any(word in tokens for word in _COMPANY_WORDS):
        return None  # nothing fits; the caller's fallback phrase is used
    chosen = finders.relevant_sentences(ctx.doc, topic, 1) if topic else []
    return finders.first_words(chosen[0].text) if chosen else None


def _quote(topic: list[str], ctx: _Ctx, nullable: bool) -> str | None:
    if ctx.focus is not None:
        return ctx.focus.text
    for token in topic:
        if token in ctx.sources:
            return ctx.sources[token].text
    chosen = finders.relevant_sentences(ctx.doc, topic, 1) if topic else []
    if chosen:
        return chosen[0].text
    return None if nullable else _first_prose(ctx.doc)


def _fill_number(schema: Schema, name: str, ctx: _Ctx) -> float | int | None:
    tokens = finders.name_tokens(name)
    topic = finders.topic_tokens(name)
    doc = ctx.doc  # numbers come from the whole document, even inside array items
    value: float | None = None
    source: Sentence | None = None
    if "year" in tokens:
        year = finders.find_year(doc, topic)
        if year:
            value, source = float(year[0]), year[1]
    elif any(word in tokens for word in _PERCENT_WORDS):
        words = [t for t in topic if t not in ("percent", "pct")] or topic
        number = finders.find_number(doc, words, True)
        if number:
            value, source = number
    elif finders.MONEY_WORDS & set(tokens):
        money = finders.find_money(doc, topic)
        if money:
            value, source = money
    else:
        number = finders.find_number(doc, topic, False)
        if number:
            value, source = number
    if value is None or not _within(value, schema):
        return None
    if source is not None:
        for token in topic:
            ctx.sources.setdefault(token, source)
    return round(value) if schema_type(schema) == "integer" else float(value)


def _within(value: float, schema: Schema) -> bool:
    low, high = schema.get("minimum"), schema.get("maximum")
    return (low is None or value >= low) and (high is None or value <= high)


def _first_prose(doc: Doc) -> str:
    for sentence in doc.sentences:
        if len(sentence.text.split()) >= 6:
            return sentence.text
    return doc.sentences[0].text if doc.sentences else ""


def _fallback(kind: str, schema: Schema, ctx: _Ctx) -> Any:
    """A value of the right type when the document offers none and null is not allowed."""
    if kind == "string" and schema.get("format") == "date":
        return "1970-01-01"
    if kind == "string":
        return finders.first_words(_first_prose(ctx.doc)) or "unknown"
    if kind in ("integer", "number"):
        return 0 if kind == "integer" else 0.0
    return None
