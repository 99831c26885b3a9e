"""Token-sized chunks with overlap. A long filing is covered whole, never truncated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.core.constants import CHARS_PER_TOKEN


@dataclass(frozen=True)
class ChunkSpan:
    idx: int
    char_start: int
    char_end: int
    token_estimate: int
    section: str | None = None
    """The filing sections the chunk holds ("Item 1A"; "Item 2, Item 3" when merged)."""


def estimate_tokens(text: str) -> int:
    """A conservative token count for `text` (English prose is ~4 characters a token)."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def split(
    text: str, chunk_tokens: int, overlap_tokens: int, count: Callable[[str], int] = estimate_tokens
) -> list[ChunkSpan]:
    """Cover `text` with windows of about `chunk_tokens`, each overlapping the previous one.

    Windows end at a paragraph, line or sentence break where one lies in the window's last
    fifth, so facts are rarely cut in half; the overlap repeats what a cut may still split.
    Every character of `text` lies in at least one window; `count` gives each one's tokens.
    """
    if overlap_tokens >= chunk_tokens:
        raise ValueError("overlap must be smaller than the chunk")
    size = chunk_tokens * CHARS_PER_TOKEN
    overlap = overlap_tokens * CHARS_PER_TOKEN
    spans: list[ChunkSpan] = []
    start = 0
    while True:
        end = len(text) if len(text) - start <= size else _break_before(text, start, start + size)
        spans.append(ChunkSpan(len(spans), start, end, count(text[start:end])))
        if end >= len(text):
            return spans
        start = max(end - overlap, start + 1)


def _break_before(text: str, start: int, limit: int) -> int:
    floor = limit - (limit - start) // 5
    for separator in ("\n\n", "\n", ". "):
        cut = text.rfind(separator, floor, limit)
        if cut != -1:
            return cut + len(separator)
    return limit
