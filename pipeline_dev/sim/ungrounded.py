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

from pipeline_dev.sim.finders import MONEY_WORDS, name_tokens

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


_MISREADS = (10.0, 0.1, 1.25, 0.75)
_MADE_UP_TITLES = (
    "Exposure to lunar mining regulation",
    "Dependence on a single airship operator",
    "Volatility in helium futures",
    "Litigation over legacy mainframe patents",
    "Seasonal demand for ice harvesting",
)


def make_up_items(instance: Any, document: str, rate: float, seed: int | None) -> tuple[Any, list[str]]:
    """`instance` with a share `rate` of its items that carry a quote made up whole: the quote
    invented, a title beside it replaced by a risk the filing never names, a money figure beside
    it misread; as a model answers when it writes what it did not read. Returns the invented quotes."""
    invented: list[str] = []
    if rate <= 0:
        return instance, invented
    flat = _flat(document)

    def walk(value: Any) -> Any:
        if isinstance(value, list):
            return [walk(v) for v in value]
        if not isinstance(value, dict):
            return value
        value = {k: walk(v) for k, v in value.items()}
        quotes = [k for k, v in value.items() if isinstance(v, str) and v.strip() and is_quote_field(k)]
        if not quotes:
            return value
        rng = random.Random(f"{seed}:made-up:{value[quotes[0]]}")
        if rng.random() >= rate:
            return value
        for key, item in value.items():
            if key in quotes:
                value[key] = _invent(item, flat, rng)
                invented.append(value[key])
            elif isinstance(item, str) and "title" in name_tokens(key):
                value[key] = rng.choice(_MADE_UP_TITLES)
            elif _is_money(key, item):
                value[key] = float(item) * rng.choice(_MISREADS)
        return value

    return walk(instance), invented


def _is_money(key: str, value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and bool(value)
        and bool(MONEY_WORDS & set(name_tokens(key)))
    )


def change_figures(instance: Any, rate: float, seed: int | None) -> Any:
    """`instance` with a share `rate` of its money figures misread (x10, /10, +25 %, -25 %), their
    quotes left as they were. Which figures, and how, is a hash of the seed and the figure."""
    if rate <= 0:
        return instance

    def walk(value: Any, key: str) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and value
            and MONEY_WORDS & set(name_tokens(key))
        ):
            rng = random.Random(f"{seed}:figure:{value}")
            if rng.random() < rate:
                return float(value) * rng.choice(_MISREADS)
        return value

    return walk(instance, "")


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
