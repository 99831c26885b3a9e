"""Retrying a run's failed or cancelled documents in the same run (`pipeline retry`): a new
round of each, which asks the model only for the chunks no earlier round answered, then the
run's report again.

In one transaction, the run's row locked: each document's round is kept (`document_attempts`:
its status, reason, attempts and times), the documents go back to `pending` with their attempts
counted from 0 (a document that "gave up after 5 attempts" gets 5 more), the run's report is
dropped and the run moves back to running. The caller then lets the run's calls go out again
(its cancel flag cleared), and sends the documents with finalize (the run's chord), which
writes the new report once they end: a run ends a retry with one report, the new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.storage import attempts, batches, document_status, reports, run_documents, run_state, runs
from pipeline.storage.db import session_scope
from pipeline.storage.models import DocStatus, Run, RunStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session


class RetryRefused(Exception):
    """The run cannot be retried as asked; the message says why and what to do."""


@dataclass
class RetryPlan:
    run_id: str
    was: str
    """The run's status before the retry."""
    document_ids: list[int] = field(default_factory=list)
    """The documents sent again (none: nothing to retry, and nothing was changed)."""
    left: list[tuple[int, str]] = field(default_factory=list)
    """Documents named with --document that are not retried: (id, why)."""
    chunks: int = 0
    answered: int = 0
    """Of the retried documents' chunks, those answered by an earlier round: not asked again."""
    had_report: bool = False
    """The run's report was dropped: finalize writes the new one."""
    via_batch: bool = False
    """The run is still on the batch path, which sends the pending documents (no chord)."""


def start_retry(
    engine: Engine, run_id: str, *, failed: bool = False, document_ids: Sequence[int] = ()
) -> RetryPlan:
    """Move the documents to retry back to pending and the run back to running (see the
    module's docstring). Which: with `failed`, the failed ones; with `document_ids`, those
    (each failed or cancelled; both options add up); with neither, the failed and cancelled
    ones. Raises RetryRefused (nothing changed) for a run its producer is still storing or an
    id that is not one of the run's documents."""
    with session_scope(engine) as session:
        run = runs.lock_run(session, run_id)  # a cancel or a report waits
        if run is None:
            raise LookupError(f"no run {run_id}")
        if run.pruned_at is not None:  # under the row lock `pipeline prune` marks it with
            raise RetryRefused(
                f"run {run_id} was pruned on {run.pruned_at:%Y-%m-%d} (`pipeline prune`): its filing "
                "texts are gone, so its documents cannot run again; submit the files again as a new run"
            )
        if run.stored_at is None:
            raise RetryRefused(
                f"run {run_id} is still being stored by its producer (`pipeline submit`): "
                "retry it once the submit has ended"
            )
        plan = RetryPlan(run_id, run.status)
        plan.document_ids, plan.left = _chosen(session, run_id, failed, document_ids)
        if not plan.document_ids:
            return plan
        plan.chunks, plan.answered = document_status.chunk_counts(session, plan.document_ids)
        attempts.keep_rounds(session, run_id, plan.document_ids)
        plan.document_ids = run_documents.retry_documents(session, run_id, plan.document_ids)
        plan.had_report = reports.drop_report(session, run_id)
        plan.via_batch = _batch_path_sends(session, run)
        if run.status != RunStatus.RUNNING:  # a running run's start time stays
            run_state.move_run(session, run_id, "retry", clear_error=True)
    return plan


def _chosen(
    session: Session, run_id: str, failed: bool, document_ids: Sequence[int]
) -> tuple[list[int], list[tuple[int, str]]]:
    """The documents to retry, and those named that are not retried (with why)."""
    wanted: set[int] = set()
    if failed or not document_ids:
        statuses = (DocStatus.FAILED,) if failed else run_documents.RETRIED_FROM
        wanted |= document_status.ids_with_status(session, run_id, statuses)
    left: list[tuple[int, str]] = []
    if document_ids:
        found = document_status.statuses_of(session, run_id, document_ids)
        unknown = sorted(set(document_ids) - set(found))
        if unknown:
            raise RetryRefused(
                f"not a document of run {run_id}: {', '.join(map(str, unknown))} "
                f"(its documents are listed by `pipeline status {run_id}`)"
            )
        for document_id, status in sorted(found.items()):
            if status in run_documents.RETRIED_FROM:
                wanted.add(document_id)
            else:
                left.append((document_id, _why_not(status)))
    return sorted(wanted), left


def _why_not(status: str) -> str:
    if status == DocStatus.EXTRACTED:
        return "extracted already"
    if status == DocStatus.SKIPPED:
        return "skipped at intake (its file cannot be used): submit it again once it is fixed"
    return f"{status}: still being worked on"


def _batch_path_sends(session: Session, run: Run) -> bool:
    """Whether the batch path sends the retried documents: a batch run not yet handed to the
    synchronous path, and not cancelled. A cancelled one is handed over now: its retry goes
    synchronously, and its batch poll ends."""
    if run.mode != "batch" or run.dispatched_at is not None:
        return False
    if run.status == RunStatus.CANCELLED:
        batches.mark_dispatched(session, run.id)
        return False
    return True
