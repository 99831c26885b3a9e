"""The signals of a field's confidence that read text (pure): whether a quote states a figure,
and how likely the tokens of each field's value were (from a call's log-probabilities)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

REVENUE_TOLERANCE = 0.005


_SCALAR_VALUE = re.compile(r'"(company|fiscal_year|revenue_usd)"\s*:\s*("(?:[^"\\]|\\.)*"|[^,}\s]+)')


class TokenProbabilities:
    """What `field_token_p` found in a call's last answer (a repair's replaces the first's)."""

    def __init__(self) -> None:
        self.found: dict[str, float] | None = None

    def read(self, content: str, tokens: list[tuple[str, float]]) -> None:
        self.found = field_token_p(content, tokens) or None


def field_token_p(content: str, tokens: Sequence[tuple[str, float]]) -> dict[str, float]:
    """For each scalar field of a JSON answer, the probability of its value's least likely token
    (the weakest link of the value the model wrote), from the answer's tokens and their
    log-probabilities; {} when the tokens do not spell the content."""
    if "".join(t for t, _ in tokens) != content:
        return {}
    spans, at = [], 0
    for token, logprob in tokens:
        spans.append((at, at + len(token), logprob))
        at += len(token)
    found: dict[str, float] = {}
    for match in _SCALAR_VALUE.finditer(content):
        start, end = match.span(2)
        if match.group(2).startswith('"'):  # a string's characters, not the quotes around it
            start, end = start + 1, end - 1
        inside = [lp for begin, stop, lp in spans if begin < end and stop > start]
        if inside:
            found[match.group(1)] = round(math.exp(min(inside)), 4)
    return found


_AMOUNT = re.compile(
    r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?\s*(thousand|million|billion|trillion|bn|mn|[mbk])?\b",
    re.IGNORECASE,
)
_SCALE = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9, "b": 1e9}
_SCALE["trillion"] = 1e12


def states_figure(quote: str, value: float) -> bool | None:
    """Whether `quote` states `value` (an amount within 0.5 %, at its own scale word or, without
    one, at any of the scales tables use); None when the quote holds no amount at all."""
    amounts = list(_AMOUNT.finditer(quote))
    if not amounts:
        return None
    for found in amounts:
        number = float(found.group(1).replace(",", "") + "." + (found.group(2) or "0"))
        word = (found.group(3) or "").lower()
        scales = [_SCALE[word]] if word else [1.0, 1e3, 1e6, 1e9]
        if any(same_figure(number * scale, value) for scale in scales):
            return True
    return False


def states_fiscal_year(text: str, year: int) -> bool:
    """Whether `text` gives `year` as a fiscal year ("fiscal 2024", "fiscal year ended ... 2024"),
    not only as a year among others."""
    return re.search(rf"fiscal(?:\s+year)?[^.\n]{{0,60}}\b{year}\b", text, re.IGNORECASE) is not None


def same_figure(a: float | None, b: float | None) -> bool:
    """Two figures within REVENUE_TOLERANCE of each other (relative)."""
    if a is None or b is None:
        return False
    return abs(a - b) <= REVENUE_TOLERANCE * max(abs(a), abs(b)) if a or b else True
