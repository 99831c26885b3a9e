"""What recent runs used: the history `pipeline plan` scales its estimates by."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from pipeline.storage.documents import reusable
from pipeline.storage.models import Chunk, Document, LLMCall, Run, RunStatus, aware


@dataclass(frozen=True)
class StageUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: int = 0
    """Summed over the calls, as the other fields."""


@dataclass
class RecentUsage:
    """Sums over the last runs of a model that sent their work synchronously and completed."""

    runs: int = 0
    documents: int = 0
    chunks: int = 0
    """Chunks answered by a call of these runs (not reused)."""
    text_tokens: int = 0
    """Those chunks' estimated text tokens (the producer's count)."""
    seconds: float = 0.0
    """The runs' wall time, started (the first document sent) to finished."""
    stages: dict[str, StageUsage] = field(default_factory=dict)


def recent_usage(
    session: Session, model: str, runs: int = 5, prompt_version: str | None = None
) -> RecentUsage:
    """The last `runs` completed sync runs of `model` that made calls (a run that reused every
    answer says nothing of what calls take), asked in `prompt_version` where given: a prompt
    layout's calls carry its own tokens around each chunk (the cached layout ~900 more than the
    compact one), so one layout's runs do not tell what the other's calls take."""
    found = RecentUsage()
    version = [Run.prompt_version == prompt_version] if prompt_version is not None else []
    candidates = session.execute(
        select(Run.id, Run.started_at, Run.created_at, Run.finished_at)
        .where(Run.model == model, Run.status == RunStatus.COMPLETED, Run.mode == "sync", *version)
        .where(Run.schema.is_(None))
        .where(Run.finished_at.is_not(None))
        .order_by(Run.finished_at.desc())
        .limit(runs * 4)
    ).all()
    for run_id, started_at, created_at, finished_at in candidates:
        if found.runs == runs:
            break
        stages = _stages(session, run_id)
        extract = stages.get("extract")
        if extract is None or not extract.calls:
            continue
        chunks, text_tokens = _called_chunks(session, run_id)
        found.runs += 1
        found.chunks += chunks
        found.text_tokens += text_tokens
        found.documents += _documents_called(session, run_id)
        found.seconds += (aware(finished_at) - aware(started_at or created_at)).total_seconds()
        for stage, usage in stages.items():
            seen = found.stages.get(stage, StageUsage())
            found.stages[stage] = StageUsage(
                seen.calls + usage.calls,
                seen.prompt_tokens + usage.prompt_tokens,
                seen.completion_tokens + usage.completion_tokens,
                seen.latency_ms + usage.latency_ms,
            )
    return found


def _stages(session: Session, run_id: str) -> dict[str, StageUsage]:
    rows = session.execute(
        select(
            LLMCall.stage,
            func.count(),
            func.coalesce(func.sum(LLMCall.prompt_tokens), 0),
            func.coalesce(func.sum(LLMCall.completion_tokens), 0),
            func.coalesce(func.sum(LLMCall.latency_ms), 0),
        )
        .where(LLMCall.run_id == run_id, LLMCall.mode == "sync")
        .group_by(LLMCall.stage)
    ).all()
    return {stage: StageUsage(int(n), int(p), int(c), int(ms)) for stage, n, p, c, ms in rows}


def _called_chunks(session: Session, run_id: str) -> tuple[int, int]:
    """The run's chunks an extract call of the run asked about, and their text tokens: read
    from the run's chunks (their run_id index), never from every chunk of the database."""
    called = (
        select(LLMCall.id)
        .where(LLMCall.run_id == run_id, LLMCall.stage == "extract")
        .where(LLMCall.document_id == Chunk.document_id, LLMCall.chunk_idx == Chunk.idx)
        .exists()
    )
    count, tokens = session.execute(
        select(func.count(), func.coalesce(func.sum(Chunk.token_estimate), 0)).where(
            Chunk.run_id == run_id, called
        )
    ).one()
    return int(count), int(tokens)


def _documents_called(session: Session, run_id: str) -> int:
    found = session.scalar(
        select(func.count(func.distinct(LLMCall.document_id))).where(
            LLMCall.run_id == run_id, LLMCall.stage == "extract"
        )
    )
    return int(found or 0)


def recent_batch_seconds(session: Session, batches: int = 10) -> float | None:
    """How long the last completed batches took at the provider, submitted to ended, on
    average; None when none has."""
    from pipeline.storage.models import LLMBatch

    rows = session.execute(
        select(LLMBatch.submitted_at, LLMBatch.ended_at)
        .where(LLMBatch.status.in_(("completed", "ingested")), LLMBatch.completed > 0)
        .where(LLMBatch.submitted_at.is_not(None), LLMBatch.ended_at.is_not(None))
        .order_by(LLMBatch.id.desc())
        .limit(batches)
    ).all()
    spans = [(aware(end) - aware(start)).total_seconds() for start, end in rows]
    return sum(spans) / len(spans) if spans else None


def store_estimate(session: Session, run_id: str, estimate: dict[str, Any]) -> None:
    session.execute(update(Run).where(Run.id == run_id).values(estimate=estimate))


@dataclass(frozen=True)
class Actual:
    calls: int
    tokens: int
    cost_usd: float
    seconds: float | None
    """Started to finished (None: not finished)."""
    cached_tokens: int = 0
    """Of the prompt tokens, those the provider served from its prompt cache."""


def run_actual(session: Session, run_id: str) -> Actual:
    """What the run used so far: its calls, their tokens, its cost and (once ended) its time."""
    calls, tokens = session.execute(
        select(
            func.count(), func.coalesce(func.sum(LLMCall.prompt_tokens + LLMCall.completion_tokens), 0)
        ).where(LLMCall.run_id == run_id)
    ).one()
    run = session.get(Run, run_id)
    seconds = None
    if run is not None and run.finished_at is not None:
        seconds = (
            aware(run.finished_at) - aware(run.started_at or run.stored_at or run.created_at)
        ).total_seconds()
    return Actual(int(calls), int(tokens), float(run.cost_usd if run else 0.0), seconds)


def answered_spans(
    session: Session, hashes: Sequence[str], models: Sequence[str], version: str
) -> set[tuple[str, int, int]]:
    """(content hash, start, end) of the chunks of these texts an earlier run answered with
    this prompt version and one of these models: a run that reuses answers asks no call for
    them (`pipeline.storage.documents.reuse_answers`, by the same rule)."""
    found: set[tuple[str, int, int]] = set()
    unique = sorted(set(hashes))
    for at in range(0, len(unique), 1000):
        rows = session.execute(
            select(Document.sha256, Chunk.char_start, Chunk.char_end)
            .join(Chunk, Chunk.document_id == Document.id)
            .where(Document.sha256.in_(unique[at : at + 1000]), *reusable(models, version))
            .distinct()
        )
        found.update((sha, start, end) for sha, start, end in rows if sha)
    return found
