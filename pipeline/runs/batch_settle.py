"""A batch line whose answer needs a synchronous call (a repair once, the rest of a cut-off
answer) settled the way the synchronous path would, with no transaction open, and under the
run's budget when it has one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel

from pipeline.context import Context, check_spend, spending
from pipeline.core import errors
from pipeline.extraction.prompting import chunk_messages
from pipeline.llm.client import CallRecord, Completion
from pipeline.llm.prompts import Message
from pipeline.runs.batch_lines import Line, Target, target_of
from pipeline.storage import documents
from pipeline.storage.models import Run

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)


def settle_input(
    ctx: Context, session: Session, run: Run, read: Line, version: str
) -> tuple[Target, list[Message]] | None:
    """The line's chunk and the chunk's prompt, which the synchronous call repeats."""
    target = target_of(ctx, session, run, read, version)
    if target is None:
        return None
    text = documents.document_text(session, target.document)
    messages, _ = chunk_messages(
        target.chunk, text, target.document.chunk_count, run.schema, doc=target.document, version=version
    )
    return target, messages


def settle(
    ctx: Context,
    run: Run,
    target: Target,
    read: Line,
    messages: list[Message],
    schema: type[BaseModel],
    calls: list[CallRecord],
) -> BaseModel | None:
    """The line's answer after the synchronous calls it needs (their records, and the line's,
    go to `calls`); None when it still fails (its chunk is asked synchronously later). Called
    with no transaction open."""
    sink = sink_for(ctx, run, calls)
    try:
        if run.budget_usd is not None:
            _refuse_once_spent(ctx, run.id, target.record, sink)
        asked = ctx.llm.structured_request(
            messages, schema, model=target.model, max_tokens=ctx.settings.extract_max_tokens, sink=sink
        )
        done = Completion(content=read.content, finish_reason=read.finish, record=target.record)
        return ctx.llm.finish_structured(done, asked)
    except errors.PipelineError as exc:
        log.info(
            "run %s: chunk %s: its batch answer failed (%s): asked synchronously later",
            run.id,
            target.chunk.id,
            exc,
        )
        return None


def sink_for(ctx: Context, run: Run, calls: list[CallRecord]) -> Callable[[CallRecord], None]:
    """Where a line's calls go: `calls`, each cost also counted against a capped run's budget."""
    return spending(ctx, run.id, calls.append) if run.budget_usd is not None else calls.append


def _refuse_once_spent(
    ctx: Context, run_id: str, line: CallRecord, sink: Callable[[CallRecord], None]
) -> None:
    """Raise BudgetSpent, the line's own record handed to `sink` (it was paid for all the same),
    when the run has spent its budget: no synchronous call is made for the line then."""
    try:
        check_spend(ctx, run_id)
    except errors.BudgetSpent:
        sink(line)
        raise
