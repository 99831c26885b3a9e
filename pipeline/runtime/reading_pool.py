"""`pipeline submit`'s reading processes (PIPELINE_SUBMIT_PROCESSES): a large run's files read
and chunked side by side (`pipeline.ingest.readers`), a batch ahead of the one being stored.

The first FROM_FILES files (a run's early documents among them) are read in the submitting
process, so that they go to the workers without waiting for processes to start; the next ones
by the pool, each batch sent to it before the one before it is handed back. A smaller run starts
no process.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from multiprocessing.pool import AsyncResult, Pool

from pipeline.core.settings import Settings
from pipeline.ingest import readers
from pipeline.ingest.walk import Candidate

AUTO_PROCESSES_AT_MOST = 4
"""PIPELINE_SUBMIT_PROCESSES=0 takes one process per CPU, at most this many."""
FROM_FILES = 1_000
"""The files read in the submitting process before the processes start: a run of a few hundred
files is read before they would have started (a second or two: a fresh interpreter's imports
and token encoding each)."""


def processes(settings: Settings) -> int:
    """The reading processes of a submit past its first FROM_FILES files (1: the submitting one alone)."""
    if settings.submit_processes:
        return settings.submit_processes
    return max(1, min(os.cpu_count() or 1, AUTO_PROCESSES_AT_MOST))


def reader(settings: Settings) -> readers.Reader:
    """The submit's reader: in processes side by side, or in this process when one is set."""
    workers = processes(settings)
    if workers <= 1:
        return readers.read_batches

    def read(
        spec: readers.Spec, batches: Iterable[list[Candidate]]
    ) -> Iterator[tuple[list[readers.ReadFile], bool]]:
        return read_side_by_side(spec, batches, workers)

    return read


def read_side_by_side(
    spec: readers.Spec, batches: Iterable[list[Candidate]], workers: int, from_files: int = FROM_FILES
) -> Iterator[tuple[list[readers.ReadFile], bool]]:
    """`readers.read_batches`, the batches after the first `from_files` files read by `workers`
    processes, each sent to them before the one before it is handed back."""
    marked = readers.marking_last(batches)
    seen = 0
    for batch, last in marked:
        seen += len(batch)
        if last or seen < from_files:
            yield [readers.read_file(spec, c) for c in batch], last
            continue
        with _pool(spec, workers) as pool:
            following, after_it = next(marked)
            ahead = _send(pool, following, workers), after_it
            yield [readers.read_file(spec, c) for c in batch], False
            for following, after_it in marked:
                sent = _send(pool, following, workers), after_it
                yield ahead[0].get(), ahead[1]
                ahead = sent
            yield ahead[0].get(), ahead[1]
        return


def _send(pool: Pool, batch: list[Candidate], workers: int) -> AsyncResult[list[readers.ReadFile]]:
    return pool.map_async(_read, batch, chunksize=max(1, len(batch) // (workers * 4)))


@contextmanager
def _pool(spec: readers.Spec, workers: int) -> Iterator[Pool]:
    """Reader processes forked from a fresh server process (not from this one, whose threads
    and connections a fork would copy), stopped when done or interrupted."""
    context: BaseContext = multiprocessing.get_context("spawn")  # Windows
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = server = multiprocessing.get_context("forkserver")
        server.set_forkserver_preload([__name__])
    pool = context.Pool(workers, initializer=_start_reader, initargs=(spec,))
    try:
        yield pool
    finally:
        pool.terminate()
        pool.join()


_spec: readers.Spec | None = None


def _start_reader(spec: readers.Spec) -> None:
    """In a reader process: Ctrl-C is the submitting process's to handle (it stops the pool)."""
    global _spec
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _spec = spec


def _read(candidate: Candidate) -> readers.ReadFile:
    assert _spec is not None, "a reader process starts with its spec"
    return readers.read_file(_spec, candidate)
