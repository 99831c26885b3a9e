"""Hierarchical synthesis: batch summaries to fit the context budget, recurse to one (pure)."""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from itertools import chain

from pipeline.ingest.chunking import estimate_tokens

Synthesize = Callable[[list[str]], str]


def pack(items: Iterable[str], budget_tokens: int) -> list[list[str]]:
    """Consecutive batches whose estimated tokens fit `budget_tokens`.

    A batch always takes at least two items when two are left, so every round of
    `reduce_to_one` shrinks the list even when single items are large.
    """
    return list(packed(items, budget_tokens))


def packed(items: Iterable[str], budget_tokens: int) -> Iterator[list[str]]:
    """`pack`'s batches, each made as `items` are read (one batch held at a time)."""
    current: list[str] = []
    used = 0
    for item in items:
        cost = estimate_tokens(item)
        if current and used + cost > budget_tokens and len(current) >= 2:
            yield current
            current, used = [], 0
        current.append(item)
        used += cost
    if current:
        yield current


def reduce_to_one(
    items: Iterable[str],
    budget_tokens: int,
    synthesize: Synthesize,
    parallelism: int = 16,
    final: Synthesize | None = None,
) -> tuple[str, int]:
    """Synthesize `items` into one answer; returns it and the number of levels used.

    While the items do not fit one prompt, each batch is synthesized (in parallel) into an
    intermediate answer, and the intermediate answers are reduced in turn. A level's calls
    go at once up to `parallelism` (the limiter paces them): each level waits for its
    slowest call, and the run's end waits for every level. The last call goes to `final`
    (default `synthesize`). `items` are read as the first level's batches are sent: no more
    than `parallelism` batches of them are held at once, whatever their number.
    """
    batches = packed(items, budget_tokens)
    first = next(batches, None) or ["(no documents were extracted)"]
    second = next(batches, None)
    depth = 1
    if second is not None:
        level = bounded_map(synthesize, chain([first, second], batches), parallelism)
        depth += 1
        found = pack(level, budget_tokens)
        while len(found) > 1:
            with ThreadPoolExecutor(max_workers=parallelism) as pool:
                level = list(pool.map(synthesize, found))
            found = pack(level, budget_tokens)
            depth += 1
        first = found[0]
    return (final or synthesize)(first), depth


def bounded_map(call: Synthesize, batches: Iterable[list[str]], parallelism: int) -> list[str]:
    """`call` on each batch in `parallelism` threads, the answers in the batches' order; a batch
    is read from `batches` only when a thread is free for it."""
    answers: list[str] = []
    with ThreadPoolExecutor(max_workers=parallelism) as pool:
        pending: deque[Future[str]] = deque()
        for batch in batches:
            if len(pending) >= parallelism:
                answers.append(pending.popleft().result())
            pending.append(pool.submit(call, batch))
        answers.extend(future.result() for future in pending)
    return answers


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
