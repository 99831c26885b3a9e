"""Pure plain-text answers, and the broken answers fault injection sends instead."""

from __future__ import annotations

import json
import re
from typing import Any

from pipeline_dev.sim.answers import resolve, schema_type
from pipeline_dev.sim.text import analyze, is_heading_line

MAX_SENTENCES = 5
_COMPANY_SUFFIX = re.compile(
    r"\b([A-Z][\w&'.-]*(?:\s+[A-Z][\w&'.-]*){0,4}\s+"
    r"(?:Inc\.?|Corp\.?|Corporation|Company|Co\.|Ltd\.?|LLC|plc|Holdings|Group))(?![\w])"
)
_COMPANY_FIELD = re.compile(r"\"?company\"?\s*[:=]\s*\"?([A-Z][^;\n\",}]{1,80})")


def companies_in(text: str) -> list[str]:
    """Company names the text states, in order of first mention, without repeats."""
    found: list[str] = []
    for label, value in analyze(text).headers:
        if "company" in label or "registrant" in label:
            found.append(value)
    found += [m.group(1).strip() for m in _COMPANY_FIELD.finditer(text)]
    found += [m.group(1).strip() for m in _COMPANY_SUFFIX.finditer(text)]
    unique: list[str] = []
    for name in found:
        name = name.rstrip(" .,;") if not name.endswith(("Inc.", "Corp.", "Co.", "Ltd.")) else name
        if name and not any(name in other or other in name for other in unique):
            unique.append(name)
    return unique


def _money(value: object) -> object:
    """12780000000.0 -> "$12.78 billion", as a report would write it."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return value
    for scale, word in ((1e9, "billion"), (1e6, "million")):
        if abs(value) >= scale:
            return f"${value / scale:,.2f} {word}"
    return f"${value:,.0f}"


def _json_facts(source: str) -> list[str] | None:
    """Sentences stating a JSON object's facts (the compress stage sends extractions)."""
    try:
        data = json.loads(source)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    facts = [
        f"{key.replace('_', ' ')}: {_money(value) if 'usd' in key.lower() else value}"
        for key, value in data.items()
        if isinstance(value, str | int | float) and not isinstance(value, bool)
        if not (isinstance(value, str) and len(value) > 120)
    ]
    sentences = ["; ".join(facts)] if facts else []
    quotes = [v for v in data.values() if isinstance(v, str) and len(v) > 120]
    for value in data.values():
        if isinstance(value, list):
            quotes += [
                " - ".join(str(v) for v in item.values() if v) for item in value if isinstance(item, dict)
            ]
    return sentences + quotes


def _score(text: str) -> int:
    capitals = {word for word in text.split()[1:] if word[:1].isupper()}
    digits = re.findall(r"\d[\d,.]*", text)
    return min(len(capitals), 6) + 2 * min(len(digits), 3) + min(len(text) // 40, 3)


def _sentence(text: str) -> str:
    """One line, ending in a full stop."""
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


def _prose(source: str) -> list[str]:
    """The most informative prose sentences of `source`, in order: no headings, no table
    rows (runs of spaces), no repeats."""
    every = [s.text for s in analyze(source).sentences]
    units: list[str] = []
    seen: set[str] = set()
    for text in every:
        if len(text.split()) < 5 or "   " in text or is_heading_line(text):
            continue
        key = " ".join(text.split())
        if any(c.islower() for c in text) and key not in seen:
            seen.add(key)
            units.append(text)
    units = units or every
    ranked = sorted(range(len(units)), key=lambda i: (-_score(units[i]), i))
    return [units[i] for i in sorted(ranked[: MAX_SENTENCES - 1])]


def build_text_answer(source: str, max_chars: int | None = None) -> str:
    """2-5 sentences drawn from `source`: its most informative ones, and the companies named.

    Fits in `max_chars` unless a single sentence is already longer.
    """
    facts = _json_facts(source.strip())
    sentences = [_sentence(s) for s in (_prose(source) if facts is None else facts[: MAX_SENTENCES - 1])]
    names = companies_in(source)
    closing = _sentence(f"Companies mentioned: {', '.join(names[:20])}") if names else None
    if not sentences:
        sentences = ["The request held no text to summarize."]
    if closing is None:
        closing = "No company was named." if len(sentences) < 2 else ""
    budget = (max_chars if max_chars is not None else 10**9) - (len(closing) + 1 if closing else 0)
    answer = sentences[0]
    for sentence in sentences[1:]:
        if len(answer) + 1 + len(sentence) > budget:
            break
        answer += " " + sentence
    return f"{answer} {closing}" if closing else answer


def violate_schema(instance: Any, schema: dict[str, Any]) -> Any:
    """Valid JSON that breaks `schema`: a required field dropped, another of the wrong type."""
    concrete, _ = resolve(schema, schema)
    if not isinstance(instance, dict):
        return {"unexpected_field": instance}
    broken = dict(instance)
    required = [k for k in concrete.get("required", list(broken)) if k in broken]
    if required:
        del broken[required[0]]
    properties: dict[str, Any] = concrete.get("properties") or {}
    for key in [k for k in broken if k in properties][:1]:
        kind = schema_type(resolve(properties[key], schema)[0])
        broken[key] = {"string": 12345, "array": "not a list"}.get(kind, "not a number")
    broken["unexpected_field"] = True
    return broken


def malformed_json(valid: str) -> str:
    """`valid` JSON broken the way models break it: unquoted keys and a trailing comma."""
    unquoted = re.sub(r'"([A-Za-z_][A-Za-z0-9_]*)"\s*:', r"\1:", valid)
    body = unquoted.rstrip()
    if body.endswith(("}", "]")):
        return body[:-1] + "," + body[-1]
    return "{" + body


def truncate(text: str, fraction: float) -> str:
    """The first `fraction` of `text`, always strictly shorter (so JSON is left unclosed)."""
    cut = min(max(1, int(len(text) * fraction)), len(text) - 1)
    return text[: max(cut, 0)]
