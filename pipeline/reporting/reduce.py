"""Hierarchical synthesis: batch summaries to fit the context budget, recurse to one (pure)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

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
    items: Sequence[str],
    budget_tokens: int,
    synthesize: Synthesize,
    parallelism: int = 16,
    final: Synthesize | None = None,
) -> tuple[str, int]:
    """Synthesize `items` into one answer; returns it and the number of levels used.

    While the items do not fit one prompt, each batch is synthesized (in parallel) into an
    intermediate answer, and the intermediate answers are reduced in turn. A level's calls
    all go at once (up to `parallelism`; the limiter paces them): each level waits for its
    slowest call, and the run's end waits for every level. The last call goes to `final`
    (default `synthesize`).
    """
    level = list(items) or ["(no documents were extracted)"]
    depth = 1
    batches = pack(level, budget_tokens)
    while len(batches) > 1:
        with ThreadPoolExecutor(max_workers=parallelism) as pool:
            level = list(pool.map(synthesize, batches))
        batches = pack(level, budget_tokens)
        depth += 1
    return (final or synthesize)(batches[0]), depth


@dataclass(frozen=True)
class Hedged:
    """The first answer of hedged copies, and the copies still running when it came: they go on
    to their end and record their calls after it."""

    answer: str
    running: list[Future[str]] = field(default_factory=list)


def hedge(call: Callable[[], str], copies: int) -> Hedged:
    """`call` made `copies` times at once; the first answer (hedged requests: the report's
    last wait is one call's latency, and the slowest of a provider's latencies is several
    times its median). The others run to their end and record themselves; all failing
    raises the first failure."""
    if copies <= 1:
        return Hedged(call())
    pool = ThreadPoolExecutor(max_workers=copies, thread_name_prefix="pipeline-hedge")
    futures = [pool.submit(contextvars.copy_context().run, call) for _ in range(copies)]
    pool.shutdown(wait=False)
    failures: list[BaseException] = []
    for future in as_completed(futures):
        failure = future.exception()
        if failure is None:
            return Hedged(future.result(), [f for f in futures if not f.done()])
        failures.append(failure)
    raise failures[0]


def first_answer(call: Callable[[], str], copies: int) -> str:
    """`hedge`'s answer alone."""
    return hedge(call, copies).answer
