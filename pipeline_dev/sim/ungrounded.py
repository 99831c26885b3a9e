"""Quotes that are not in the document: the hallucinations grounding has to catch (pure).

A share of the quote fields of an answer (`--ungrounded-rate`) is replaced by a sentence the
document does not hold: the quote with a figure changed, a paraphrase, or an invented
sentence. Which quotes is decided by a hash of the seed and the quote, not by arrival order,
so the same quote is replaced the same way in every chunk and every run with that seed.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from pipeline_dev.sim.finders import name_tokens

_QUOTE_WORDS = ("quote", "excerpt", "sentence", "citation", "evidence")
_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
_PARAPHRASES = (
    ("could", "might"),
    ("adversely affect", "negatively impact"),
    ("our", "the company's"),
    ("we ", "management "),
    ("significant", "material"),
)
_INVENTED = (
    "Management expects {topic} to remain broadly stable over the coming fiscal year.",
    "The company has not identified any material exposure related to {topic} to date.",
    "Analysts have historically viewed {topic} as a modest consideration for the business.",
)


@dataclass
class Invented:
    quotes_seen: int = 0
    quotes: list[str] = field(default_factory=list)


def is_quote_field(name: str) -> bool:
    return any(word in name_tokens(name) for word in _QUOTE_WORDS)


def replace_quotes(instance: Any, document: str, rate: float, seed: int | None) -> tuple[Any, Invented]:
    """`instance` with a share `rate` of its quote strings replaced by text not in `document`."""
    found = Invented()
    if rate <= 0:
        return instance, found
    flat = _flat(document)

    def walk(value: Any, key: str) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, str) and value.strip() and is_quote_field(key):
            found.quotes_seen += 1
            rng = random.Random(f"{seed}:{value}")
            if rng.random() < rate:
                invented = _invent(value, flat, rng)
                found.quotes.append(invented)
                return invented
        return value

    return walk(instance, ""), found


def _flat(text: str) -> str:
    return " ".join(text.lower().split())


def _invent(quote: str, flat_document: str, rng: random.Random) -> str:
    candidates = [_changed_figure(quote), _paraphrase(quote)]
    rng.shuffle(candidates)
    topic = " ".join(quote.split()[:4]).lower().rstrip(".,;:")
    candidates.append(rng.choice(_INVENTED).format(topic=topic or "this matter"))
    for candidate in candidates:
        if candidate and _flat(candidate) not in flat_document:
            return candidate
    return f"This sentence (#{rng.randrange(10**9)}) does not appear in the filing."


def _changed_figure(quote: str) -> str | None:
    match = _NUMBER.search(quote)
    if match is None:
        return None
    digits = match.group(0)
    first = next(i for i, ch in enumerate(digits) if ch.isdigit())
    bumped = str((int(digits[first]) + 3) % 10 or 7)
    return quote[: match.start()] + digits[:first] + bumped + digits[first + 1 :] + quote[match.end() :]


def _paraphrase(quote: str) -> str | None:
    changed = quote
    for old, new in _PARAPHRASES:
        changed = changed.replace(old, new)
    if changed == quote:
        changed = f"According to the company, {quote[:1].lower()}{quote[1:]}"
    return changed
