"""Reading a submit's files: each file loaded (`inputs.load`), its sections found, its chunks cut
and counted, its text checked for instruction-like passages.

Reading is most of a submit's CPU (the intake's parsing, tiktoken, the section and injection
scans); storing is a few statements a batch. What is read depends only on the file and the
reading settings (`Spec`), never on the run: whether a file is a duplicate or over a token cap
is the caller's to decide, in order. So `pipeline submit` can read a large run's batches in
processes side by side (`pipeline.runtime.reading_pool`, PIPELINE_SUBMIT_PROCESSES); the
domain reads in the calling process (a worker's nightly submit starts no process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from pipeline.core.settings import Settings
from pipeline.ingest import chunking, injection, inputs, sections
from pipeline.ingest.walk import Candidate
from pipeline.llm.tokens import counter_for


@dataclass(frozen=True)
class Spec:
    """What reading a file needs: the reading settings alone (no secret goes to a reader)."""

    max_file_bytes: int
    reading: inputs.Reading
    chunk_tokens: int
    overlap_tokens: int
    model: str

    @classmethod
    def of(cls, settings: Settings) -> Spec:
        budget = settings.chunk_budget_tokens()
        return cls(
            settings.max_file_bytes,
            inputs.reading(settings),
            budget,
            min(settings.chunk_overlap_tokens, budget // 4),
            settings.llm_model,
        )


@dataclass(frozen=True)
class ReadFile:
    """One file as read: loaded, and where usable its sections, chunks and injection finding."""

    loaded: inputs.LoadedFile
    found: sections.Found | None = None
    spans: list[chunking.ChunkSpan] = field(default_factory=list)
    injection_excerpt: str | None = None

    @property
    def tokens(self) -> int:
        return sum(s.token_estimate for s in self.spans)


def read_file(spec: Spec, candidate: Candidate) -> ReadFile:
    loaded = inputs.load(candidate, spec.max_file_bytes, spec.reading)
    if loaded.problem or loaded.text is None:
        return ReadFile(loaded)
    form = loaded.intake.meta.form if loaded.intake else None
    found = sections.locate(loaded.text, form)
    spans = sections.split_by_section(
        loaded.text, spec.chunk_tokens, spec.overlap_tokens, found.sections, counter_for(spec.model)
    )
    finding = injection.detect(loaded.text)
    return ReadFile(loaded, found, spans, finding.excerpt if finding else None)


Reader = Callable[[Spec, Iterable[list[Candidate]]], Iterator[tuple[list[ReadFile], bool]]]
"""Reads a submit's batches, in order, each with whether it is the last: `read_batches` in this
process, or the CLI's reading processes (`pipeline.runtime.reading_pool`)."""


def read_batches(spec: Spec, batches: Iterable[list[Candidate]]) -> Iterator[tuple[list[ReadFile], bool]]:
    """Each batch of candidates read in this process, in order, with whether it is the last."""
    for batch, last in marking_last(batches):
        yield [read_file(spec, c) for c in batch], last


def marking_last(batches: Iterable[list[Candidate]]) -> Iterator[tuple[list[Candidate], bool]]:
    """Each batch with whether it is the last (the next one is taken from `batches` first)."""
    pending = iter(batches)
    current = next(pending, None)
    while current is not None:
        following = next(pending, None)
        yield current, following is None
        current = following
