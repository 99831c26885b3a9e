"""Repairing a run: `pipeline cancel` (stop spending on it) and `pipeline retry` (its failed
documents again, in the same run)."""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from pipeline.cli.base import console, deployment_settings, fail, main, open_engine, ping_broker
from pipeline.core import exits

if TYPE_CHECKING:
    import redis
    from sqlalchemy import Engine

    from pipeline.core.settings import Settings
    from pipeline.llm.stops import StopFlags
    from pipeline.runs.cancel import CancelOutcome
    from pipeline.runs.retry import RetryPlan


@main.command()
@click.argument("run")
@click.option("--reason", help="Why, in a few words: kept in the run's and its documents' errors.")
def cancel(run: str, reason: str | None) -> None:
    """Stop a run: no new LLM call for it, its provider batches cancelled, its unfinished
    documents marked cancelled; writes the report of what was done. Safe to repeat."""
    settings = deployment_settings("cancel")
    engine = open_engine(settings)
    run_id = _run_id(engine, run)
    by = f"`pipeline cancel` on {socket.gethostname()}" + (f": {reason}" if reason else "")
    outcome = cancel_and_report(engine, settings, run_id, by, stop_flags(settings))
    sys.exit(_said(outcome))


def cancel_and_report(
    engine: Engine, settings: Settings, run_id: str, by: str, flags: StopFlags | None, *, hint: str = ""
) -> CancelOutcome:
    """Cancel the run (`pipeline.runs.cancel`) and write its report of what was done (again,
    on a repeated cancel: its totals then count the calls that were in flight)."""
    from pipeline.reporting.synthesize import report_cancelled
    from pipeline.runs.cancel import cancel_run

    outcome = cancel_run(engine, settings, run_id, by, flags, hint=hint)
    if not outcome.ended:
        report_cancelled(engine, run_id)
    return outcome


def _said(outcome: CancelOutcome) -> int:
    """Print what the cancel did; its exit code (3: a provider batch or the workers' check
    could not be reached, and may still spend: cancel again)."""
    run_id = outcome.run_id
    if outcome.ended:
        console.print(f"run {run_id} has ended ({outcome.status}): nothing to cancel")
        return exits.OK
    if outcome.already:
        since = f"; {outcome.documents} documents stored since marked cancelled" if outcome.documents else ""
        console.print(f"run {run_id} was already cancelled ({escape(outcome.reason or '')}){since}")
    else:
        batches = f"; {len(outcome.batches)} provider batches cancelled" if outcome.batches else ""
        console.print(
            f"[bold]run {run_id} cancelled:[/] {outcome.documents} unfinished documents marked cancelled "
            f"({outcome.extracted} of {outcome.total} extracted){batches}; no new LLM call goes out for it"
        )
    code = exits.OK
    for problem in outcome.batch_errors:
        console.print(f"[bold red]error:[/] a provider batch was not cancelled: {escape(problem)}")
        code = exits.UNREACHABLE
    if outcome.flag_error:
        console.print(
            "[bold red]error:[/] the workers' check before each call was not told (Redis): "
            f"{escape(outcome.flag_error)}; their calls under way stop at their next write"
        )
        code = exits.UNREACHABLE
    if code != exits.OK:
        console.print(f"run `pipeline cancel {run_id}` again once the provider or Redis answers")
    console.print(f"report: `pipeline report {run_id}`; finish the run later with `pipeline retry {run_id}`")
    return code


@main.command()
@click.argument("run")
@click.option(
    "--failed",
    is_flag=True,
    help="Retry its failed documents [default, without --document: failed and cancelled].",
)
@click.option(
    "--document",
    "document_ids",
    type=int,
    multiple=True,
    metavar="ID",
    help="Retry this document (failed or cancelled); repeat for more.",
)
@click.option("--wait", is_flag=True, help="Show progress until the run ends.")
def retry(run: str, failed: bool, document_ids: tuple[int, ...], wait: bool) -> None:
    """Run a run's failed (and cancelled) documents again, in the same run: the chunk answers
    stored are reused, each earlier round is kept (document_attempts), and the run's report is
    written again."""
    from pipeline.cli.celery_app import enqueue_run
    from pipeline.cli.follow import follow
    from pipeline.runs.retry import RetryRefused, start_retry

    settings = deployment_settings("retry")
    engine = open_engine(settings)
    run_id = _run_id(engine, run)
    ping_broker(settings)  # nothing is moved back for documents no broker would take
    try:
        plan = start_retry(engine, run_id, failed=failed, document_ids=document_ids)
    except RetryRefused as exc:
        fail(str(exc))
    for document_id, why in plan.left:
        console.print(f"document {document_id} not retried: {escape(why)}")
    if not plan.document_ids:
        which = "failed" if failed and not document_ids else "failed or cancelled"
        console.print(f"run {run_id} ({plan.was}): nothing to retry (no {which} document asked for)")
        sys.exit(exits.OK)
    _let_it_run(settings, run_id)
    if not plan.via_batch:
        enqueue_run(run_id, plan.document_ids)
    console.print(_retrying(plan))
    sys.exit(follow(engine, run_id) if wait else exits.OK)


def _retrying(plan: RetryPlan) -> str:
    asked = plan.chunks - plan.answered
    how = "the batch path sends them" if plan.via_batch else "sent to the workers"
    report = "its report is written again" if plan.had_report else "its report follows"
    return (
        f"retrying {len(plan.document_ids)} documents of run {plan.run_id} ({plan.was} until now), "
        f"{how}: {plan.answered} of {plan.chunks} chunks answered before are reused, {asked} asked; "
        f"{report} once they end"
    )


def _let_it_run(settings: Settings, run_id: str) -> None:
    """The run's calls may go out again (its cancel flag), and its new report may be sent at
    once (the once-per-lease mark of the one before)."""
    from pipeline.recovery.steps import forget

    flags = stop_flags(settings)
    if flags is not None:
        flags.clear(run_id)
    client = _redis(settings.redis_url)
    if client is not None:
        try:
            forget(client, f"report:{run_id}")
        finally:
            client.close()


def _run_id(engine: Engine, run: str) -> str:
    from pipeline.runs.status import UnknownRun, resolve_run_id

    try:
        return resolve_run_id(engine, run)
    except UnknownRun as exc:
        fail(str(exc))


def stop_flags(settings: Settings) -> StopFlags | None:
    """The runs' cancel flags, in the limiter's Redis (where the workers check them)."""
    from pipeline.llm.stops import StopFlags

    client = _redis(settings.limiter_redis_url or settings.redis_url)
    return None if client is None else StopFlags(client)


def _redis(url: str | None) -> redis.Redis | None:
    import redis

    from pipeline.core.constants import REDIS_CLIENT_OPTIONS

    return None if not url else redis.Redis.from_url(url, **REDIS_CLIENT_OPTIONS)
