"""Pure finders: the value a field name asks for, looked up in an analyzed document."""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal
from typing import Any

from pipeline_dev.sim.text import Doc, Sentence, has_word, is_heading_line, stems_in


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# Words that say what unit or role a field has, not what it is about.
GENERIC_WORDS = frozenset(
    _words(
        "quote quotes text sentence excerpt source title name names description summary detail details "
        "id value values type usd dollars dollar amount total item items list of the and in is num number "
        "count millions thousands billions"
    )
)
RISK_WORDS = _words(
    "risk adverse could may might uncertain harm disrupt depend fail litigation volatil loss declin "
    "threat breach unable impair"
)
SYNONYMS: dict[str, tuple[str, ...]] = {
    "revenue": ("revenue", "net sales", "total sales"),
    "sales": ("net sales", "sales", "revenue"),
    "income": ("net income", "income"),
    "employees": ("employees", "employee", "headcount"),
}
MONEY_WORDS = frozenset(
    _words(
        "usd dollars dollar revenue revenues sales income profit earnings cost costs expense expenses "
        "price cash assets liabilities debt amount ebitda capex dividend dividends"
    )
)
_SCALE = {
    "trillion": 10**12,
    "billion": 10**9,
    "bn": 10**9,
    "million": 10**6,
    "mm": 10**6,
    "m": 10**6,
    "thousand": 10**3,
    "k": 10**3,
}
MONEY = re.compile(
    r"(?:US)?\$\s?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:\s*(trillion|billion|million|thousand|bn|mm|m|k)\b)?",
    re.IGNORECASE,
)
YEAR = re.compile(r"\b(19[5-9]\d|20\d\d)\b")
_FISCAL_YEAR_ENDED = re.compile(
    r"fiscal\s+year\s+ended\s+(?:[A-Z][a-z]+\.?\s+\d{1,2},?\s+)?(\d{4})", re.IGNORECASE
)
_FISCAL_NEAR = re.compile(r"fiscal(?:\s+year)?\s+(\d{4})\b", re.IGNORECASE)
# "expect to spend ... in fiscal 2024", "extend through fiscal 2024": not the year reported on.
_FUTURE = re.compile(
    r"\b(through|until|by|expect\w*|will|plan\w*|anticipat\w*|intend\w*|beginning|starting|into|next)\b",
    re.IGNORECASE,
)


def _forward_looking(text: str, position: int) -> bool:
    """Whether the sentence leading up to `position` looks ahead ("we expect ... in")."""
    before = text[max(0, position - 160) : position]
    before = before[before.rfind(". ") + 1 :]
    return bool(_FUTURE.search(before))


PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s?(?:%|percent\b)")
NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")


def name_tokens(name: str) -> list[str]:
    """`revenueUsd` / `revenue_usd` -> ["revenue", "usd"]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).lower()
    return [token for token in _TOKEN_SPLIT.split(spaced) if token]


def topic_tokens(name: str) -> list[str]:
    """The tokens of a field name that say what it is about ("revenue" of "revenue_usd")."""
    tokens = [t for t in name_tokens(name) if t not in GENERIC_WORDS and len(t) > 1]
    # Plurals match by prefix later on: "factors" -> "factor".
    return [t[:-1] if len(t) > 4 and t.endswith("s") else t for t in tokens]


def phrases_for(tokens: list[str]) -> list[str]:
    """Phrases to look for in the text for these topic tokens, synonyms included."""
    phrases: list[str] = []
    for token in tokens:
        phrases.extend(SYNONYMS.get(token, (token,)))
    return phrases


def money_value(match: re.Match[str]) -> float:
    """USD units of a `MONEY` match: "$1,234.5 million" -> 1234500000.0."""
    digits = match.group(1).replace(",", "") + (match.group(2) or "")
    scale = _SCALE.get((match.group(3) or "").lower(), 1)
    # Decimal keeps "1,234.7 million" at exactly 1234700000.0.
    return float(Decimal(digits) * scale)


def find_money(doc: Doc, tokens: list[str]) -> tuple[float, Sentence] | None:
    """The amount stated for the topic, e.g. "Total revenue for fiscal 2025 was $1.2 billion".

    Prefers sentences naming the topic, starting with "Total", with "was"/"were".
    """
    phrases = phrases_for(tokens)
    best: tuple[int, int, Sentence] | None = None
    for index, sentence in enumerate(doc.sentences):
        # Runs of spaces mean a table row: its figures are often "in thousands".
        if "$" not in sentence.text or "   " in sentence.text:
            continue
        lower = sentence.text.lower()
        hits = [p for p in phrases if p in lower]
        if phrases and not hits:
            continue
        score = 3 * len(hits) + ("total" in lower) + bool({"was", "were"} & sentence.words)
        if best is None or score > best[0]:
            best = (score, index, sentence)
    if best is None:
        return None
    sentence = best[2]
    lower = sentence.text.lower()
    anchor = min((lower.find(p) for p in phrases if p in lower), default=0)
    matches = list(MONEY.finditer(sentence.text))
    after = [m for m in matches if m.start() >= anchor]
    chosen = after or matches
    return (money_value(chosen[0]), sentence) if chosen else None


def find_year(doc: Doc, tokens: list[str]) -> tuple[int, Sentence | None] | None:
    """A year: "fiscal year ended December 31, 2025" for fiscal fields, else near the topic.

    A fiscal field without any "fiscal ..." mention gets None: other years in the text
    (founding, expiries) are not the one reported on.
    """
    if "fiscal" in tokens:
        match = _FISCAL_YEAR_ENDED.search(doc.text)
        if match and YEAR.fullmatch(match.group(1)):
            return int(match.group(1)), None
        # Without the cover line, the year the text reports on is the one it names most
        # ("revenue for fiscal 2025 ... compared with fiscal 2024"); ties go to the later.
        counts = Counter(
            m.group(1)
            for m in _FISCAL_NEAR.finditer(doc.text)
            if YEAR.fullmatch(m.group(1)) and not _forward_looking(doc.text, m.start())
        )
        if counts:
            return int(max(counts, key=lambda year: (counts[year], year))), None
        return None
    topic = [t for t in tokens if t not in ("fiscal", "year")]
    for sentence in doc.sentences:
        if topic and not all(has_word(sentence.words, t) for t in topic):
            continue
        if not topic and not has_word(sentence.words, "year"):
            continue
        match = YEAR.search(sentence.text)
        if match:
            return int(match.group(1)), sentence
    return None


def find_number(doc: Doc, tokens: list[str], percent: bool) -> tuple[float, Sentence] | None:
    """A number stated next to the topic words (a percentage when `percent`)."""
    if not tokens:
        return None
    pattern = PERCENT if percent else NUMBER
    for sentence in doc.sentences:
        lower = sentence.text.lower()
        anchors = [lower.find(t) for t in tokens if t in lower]
        if not anchors:
            continue
        found = [m for m in pattern.finditer(sentence.text) if not YEAR.fullmatch(m.group(0))]
        if found:
            nearest = min(found, key=lambda m: min(abs(m.start() - a) for a in anchors))
            return float(nearest.group(1 if percent else 0).replace(",", "")), sentence
    return None


def find_header(doc: Doc, name: str) -> str | None:
    """The value of a `LABEL: value` line whose label holds the field name's words.

    "company" finds "COMPANY CONFORMED NAME: Acme Corp"; labels holding all the
    words win, and "name" in the label breaks ties.
    """
    tokens = [t for t in name_tokens(name) if t not in ("the", "of")] or [name.lower()]
    best: tuple[int, str] | None = None
    for label, value in doc.headers:
        label_words = label.split()
        hits = sum(any(w.startswith(t) for w in label_words) for t in tokens)
        if hits == 0 or (hits < len(tokens) and tokens != ["name"] and len(tokens) > 1):
            continue
        score = 2 * hits + ("name" in label_words)
        if best is None or score > best[0]:
            best = (score, value)
    return best[1] if best else None


def relevance(sentence: Sentence, tokens: list[str]) -> int:
    """How much a sentence is about the topic: the words naming it, and risk words for risks."""
    score = 2 * len(stems_in(sentence.lower, tuple(tokens)))
    if "risk" in tokens:
        score += min(3, len(stems_in(sentence.lower, RISK_WORDS)))
    return score


def relevant_sentences(doc: Doc, tokens: list[str], limit: int) -> list[Sentence]:
    """Up to `limit` prose sentences about the topic, one per paragraph, in document order.

    Paragraphs under a heading naming the topic ("Item 1A. Risk Factors") come first (the
    more of its words the better), then titled ones, then the most relevant. Each gives
    its first qualifying sentence: the lead of a risk, not its boilerplate closing line.
    """
    threshold = 3 if "risk" in tokens else 2
    paragraphs: dict[int, list[Any]] = {}  # block -> [in_section, titled, best score, -index, sentence]
    for index, sentence in enumerate(doc.sentences):
        text = sentence.text
        if len(text.split()) < 6 or not any(c.islower() for c in text) or is_heading_line(text):
            continue
        score = relevance(sentence, tokens)
        # Under "Item 1A. Risk Factors" any risk word will do; elsewhere it takes more.
        in_section = sum(t in sentence.section for t in tokens)
        if score < (1 if in_section else threshold):
            continue
        entry = paragraphs.get(sentence.block)
        if entry is None:
            paragraphs[sentence.block] = [in_section, sentence.title is not None, score, -index, sentence]
        else:
            entry[2] = max(entry[2], score)
    ranked = sorted(paragraphs.values(), key=lambda e: tuple(e[:4]), reverse=True)[:limit]
    return [entry[4] for entry in sorted(ranked, key=lambda e: -e[3])]


def first_words(text: str, count: int = 8) -> str:
    """The first `count` words of `text`, without trailing punctuation."""
    return " ".join(text.split()[:count]).rstrip(".,;:!?") or text.strip()
