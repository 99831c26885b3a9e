"""Building the run's chord: one extract task per document, then finalize.

Tasks are sent by name (`workers.app` routes them by name): the producer that sends them does
not import their code (`workers.tasks` loads the whole extraction path and the LLM client,
about a second before a run's first documents could go)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from celery import chord
from celery.canvas import Signature

from pipeline.core.settings import Settings
from pipeline.ingest.producer import SubmitPlan
from pipeline.runs.estimate import keep_estimate
from pipeline.runs.mode import decide
from pipeline.runs.resume import ResumePlan
from workers.app import app

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.runs.watchdog import Verdict

EXTRACT = "pipeline.extract"
FINALIZE = "pipeline.finalize"
BATCH_TICK = "pipeline.batch_tick"
SEND_PIPELINE_MESSAGES = 200
"""Messages per Redis pipeline when a run's documents are streamed (a submit's commit batch)."""


def _task(name: str, *args: Any) -> Signature:
    return app.signature(name, args=args, immutable=True)


def enqueue_run(run_id: str, document_ids: Sequence[int]) -> str:
    """Send the run's chord; messages carry ids only. Returns the chord's result id.

    Documents sent before (`enqueue_early`) are not in it: finalize reads from the database
    whether every document is final, and waits for them. Without documents, finalize goes alone."""
    if not document_ids:
        return enqueue_finalize(run_id)
    header = [_task(EXTRACT, document_id) for document_id in document_ids]
    result = chord(header, app=app)(_task(FINALIZE, *finalize_args(run_id, document_ids)))
    return str(result.id)


def finalize_args(run_id: str, document_ids: Sequence[int]) -> tuple[str, int]:
    """The chord's finalize names one of the run's documents too: a run deleted by the time it
    runs (`prune --all` of a run just cancelled) is told from one the worker's database never had."""
    return run_id, document_ids[0]


def enqueue_batch(run_id: str) -> str:
    """Start polling a batch run: its first tick builds and submits its input files."""
    return str(app.send_task(BATCH_TICK, (run_id,)).id)


def start_run(engine: Engine, settings: Settings, plan: SubmitPlan) -> str:
    """Keep the run's estimate, decide its mode (recorded on the run with its reason and tiers)
    and send it: the chord, or the batch path's first tick. Returns the mode."""
    choice = decide(engine, settings, plan, sync_s=keep_estimate(engine, settings, plan))
    if choice.mode == "batch":
        enqueue_batch(plan.run_id)
    else:
        enqueue_run(plan.run_id, plan.document_ids)
    return choice.mode


def enqueue_early(document_ids: Sequence[int]) -> None:
    """Send a batch of a run's documents while the producer still reads the rest (no chord:
    finalize, sent once everything is stored, reads from the database when every document is
    final). One producer for the batch, its messages pipelined to Redis (kombu's publish batch:
    a round trip per SEND_PIPELINE_MESSAGES, not per message)."""
    with app.producer_or_acquire() as producer, producer.batch(max_size=SEND_PIPELINE_MESSAGES):
        for document_id in document_ids:  # no chord waits for these: their results are not kept
            app.send_task(EXTRACT, (document_id,), ignore_result=True, producer=producer)


def enqueue_finalize(run_id: str) -> str:
    """Send the finalize step alone (a run whose documents are all final, but no report)."""
    return str(app.send_task(FINALIZE, (run_id,)).id)


def enqueue_resume(plan: ResumePlan) -> None:
    """Send what a resume plan says: its documents and finalize, or finalize alone (a batch
    run still on the batch path: its poll)."""
    if plan.has_report:
        return
    if plan.batch_polls:
        enqueue_batch(plan.run_id)
    elif plan.document_ids:
        enqueue_run(plan.run_id, plan.document_ids)
    else:
        enqueue_finalize(plan.run_id)


def resume_idle_runs(engine: Engine, settings: Settings) -> list[Verdict]:
    """One watchdog pass: enqueue the resumes it decides; returns every verdict."""
    from pipeline.runs import watchdog

    verdicts = watchdog.check(engine, settings, workers_alive=_workers_alive(settings))
    for verdict in verdicts:
        if verdict.plan is not None:
            enqueue_resume(verdict.plan)
    return verdicts


def _workers_alive(settings: Settings) -> int | None:
    """Worker processes with a live heartbeat; None when Redis does not answer."""
    from pipeline.recovery.heartbeat import live_workers_at
    from workers.app import LOCAL_REDIS_URL

    found = live_workers_at(settings.redis_url or LOCAL_REDIS_URL)
    return None if found is None else len(found)
