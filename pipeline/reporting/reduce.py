"""Hierarchical synthesis: batch summaries to fit the context budget, recurse to one (pure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from pipeline.ingest.chunking import estimate_tokens

Synthesize = Callable[[list[str]], str]


def pack(items: Sequence[str], budget_tokens: int) -> list[list[str]]:
    """Consecutive batches whose estimated tokens fit `budget_tokens`.

    A batch always takes at least two items when two are left, so every round of
    `reduce_to_one` shrinks the list even when single items are large.
    """
    batches: list[list[str]] = []
    current: list[str] = []
    used = 0
    for item in items:
        cost = estimate_tokens(item)
        if current and used + cost > budget_tokens and len(current) >= 2:
            batches.append(current)
            current, used = [], 0
        current.append(item)
        used += cost
    if current:
        batches.append(current)
    return batches


def reduce_to_one(
    items: Sequence[str], budget_tokens: int, synthesize: Synthesize, parallelism: int = 16
) -> tuple[str, int]:
    """Synthesize `items` into one answer; returns it and the number of levels used.

    While the items do not fit one prompt, each batch is synthesized (in parallel) into an
    intermediate answer, and the intermediate answers are reduced in turn. A level's calls
    all go at once (up to `parallelism`; the limiter paces them): each level waits for its
    slowest call, and the run's end waits for every level.
    """
    level = list(items) or ["(no documents were extracted)"]
    depth = 1
    batches = pack(level, budget_tokens)
    while len(batches) > 1:
        with ThreadPoolExecutor(max_workers=parallelism) as pool:
            level = list(pool.map(synthesize, batches))
        batches = pack(level, budget_tokens)
        depth += 1
    return synthesize(batches[0]), depth
