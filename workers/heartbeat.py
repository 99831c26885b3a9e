"""The worker process's heartbeat (`pipeline.recovery.heartbeat`), started when the worker is ready
(and in each child of a prefork pool), stopped at shutdown."""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from pipeline.extraction import prompting
from pipeline.recovery import deliveries
from pipeline.recovery.heartbeat import Heartbeat, Reclaimed
from pipeline.runs.inbox import InboxWatch
from workers.context import redis_client, worker_context

log = logging.getLogger(__name__)
_beats: list[Heartbeat] = []


def send_again(taken: list[Reclaimed]) -> None:
    """Reclaimed documents go to the queue again, with a finalize for each of their runs: the
    run's chord waits for the dead worker's messages, which Redis returns only after hours."""
    from workers.extract_tasks import extract
    from workers.run_tasks import FINALIZE_POLL_S, finalize

    for item in taken:
        extract.apply_async((item.document_id,))
    # One of its documents goes with each run's finalize: a run deleted meanwhile is told apart.
    for run_id, document_id in sorted({item.run_id: item.document_id for item in taken}.items()):
        finalize.apply_async((run_id, document_id), countdown=FINALIZE_POLL_S)


def finalize_run(run_id: str) -> None:
    from workers.run_tasks import finalize

    finalize.apply_async((run_id,))


def poll_batches(run_id: str) -> None:
    from workers.run_tasks import batch_tick

    batch_tick.apply_async((run_id,))


def _start(name: str) -> None:
    ctx = worker_context()
    ctx.llm.warm_up()  # before the first task, not during it
    # The prompt layout a run submitted with this environment takes (a run of the other layout
    # builds what it needs on its first filing).
    prompting.warm_up(ctx.settings.prompt_version())
    beat = Heartbeat(
        ctx.engine,
        redis_client(),
        ctx.leases,
        send_again,
        finalize_run,
        name=name,
        poll=poll_batches,
        poll_quiet_s=3 * ctx.settings.batch_poll_s,
        published=InboxWatch(ctx.settings.inbox),  # beat and status compare it with theirs
    )
    beat.start()
    _beats.append(beat)
    log.info(
        "heartbeat every %.0f s as %s (lease %.0f s)", beat.interval_s, ctx.leases.owner, ctx.leases.lease_s
    )


@signals.worker_ready.connect
def _on_ready(sender: Any = None, **_: Any) -> None:
    _start(str(getattr(sender, "hostname", "") or ""))


@signals.worker_process_init.connect
def _on_child(**_: Any) -> None:
    _start("")


@signals.task_received.connect
def _on_received(request: Any = None, **_: Any) -> None:
    """Note an extraction's delivery as it arrives, before any thread starts it: should the
    process die before its lease is taken, a live worker sends the document again. The request
    names the receiver for the process that runs the task (under prefork, a child)."""
    if request is None or request.name != "pipeline.extract" or not request.args:
        return
    try:
        retries = int(request.request_dict.get("retries") or 0)
        owner = worker_context().leases.owner
        request.request_dict[deliveries.RECEIVER_FIELD] = owner
        deliveries.note_received(redis_client(), owner, int(request.args[0]), request.id, retries)
    except Exception as exc:  # Redis is down: the broker's visibility timeout is the last resort
        log.warning("could not note the delivery %s: %s", request.id, exc)


@signals.task_postrun.connect
def _on_ended(task: Any = None, **_: Any) -> None:
    """An extraction's task ended (its document leased, final, or handed back for a retry): the
    process's next beat drops the delivery from the set of the process that noted it. Not
    before the end: a kill before the lease's commit must still find the delivery noted."""
    if task is None or task.name != "pipeline.extract" or not task.request.args:
        return
    request = task.request
    receiver = getattr(request, deliveries.RECEIVER_FIELD, None)
    if receiver:  # else nothing noted it
        done = deliveries.handled(str(receiver), int(request.args[0]), request.id, int(request.retries or 0))
        worker_context().leases.handled(done)


@signals.worker_shutdown.connect
def _on_shutdown(**_: Any) -> None:
    while _beats:
        _beats.pop().stop()
