"""An ended batch's output and error files stored line by line: the lines that need no call
in groups of LINES_PER_TRANSACTION, a line that needs a synchronous call alone, right after its
call, each with the file's position after it, so that an ingestion a crash cut off resumes
where it stopped and no line is stored, or paid for, twice."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from pydantic import BaseModel

from pipeline.context import Context
from pipeline.llm.batch import BatchAPI, BatchState
from pipeline.llm.client import CallRecord
from pipeline.runs.batch_lines import UNREADABLE, Line, Target, call_row, schema_of, target_of
from pipeline.runs.batch_settle import settle, settle_input, sink_for
from pipeline.storage import batches as repo
from pipeline.storage import llm_calls
from pipeline.storage.db import session_scope
from pipeline.storage.models import LLMBatch, Run

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

LINES_PER_TRANSACTION = 100


def ingest(ctx: Context, api: BatchAPI, run: Run, row: LLMBatch, state: BatchState, version: str) -> int:
    """Store the answers of an ended batch's output and error files, line by line, resuming
    after the lines a crashed ingestion committed (a file's lines come in the same order each
    time it is read). Lines that need no call commit in groups; a line that needs a
    synchronous call commits alone, right after its call (`_store_settled`)."""
    stored = 0
    schema = schema_of(run)
    for file_id, done_column in (
        (state.output_file_id, "output_lines_done"),
        (state.error_file_id, "error_lines_done"),
    ):
        if not file_id:
            continue
        skip = int(getattr(row, done_column) or 0)
        group: list[Line] = []
        position = 0
        for line in api.lines(file_id):
            position += 1
            if position <= skip:
                continue
            read = Line.of(line, schema)
            if not line.answered:  # a line refused for its prompt_cache_key: later files go without
                ctx.llm.cache_keys.heard(line.status_code, line.error or json.dumps(line.body))
            if read.plain:
                group.append(read)
                if len(group) >= LINES_PER_TRANSACTION:
                    stored += _store_group(ctx, run, row, group, version, done_column, position)
                    group = []
                continue
            if group:  # the lines before it first: what a file's reader stored is a position
                stored += _store_group(ctx, run, row, group, version, done_column, position - 1)
                group = []
            stored += _store_settled(ctx, run, row, read, version, schema, done_column, position)
        if group:
            stored += _store_group(ctx, run, row, group, version, done_column, position)
    return stored


def _store_group(
    ctx: Context,
    run: Run,
    row: LLMBatch,
    group: list[Line],
    version: str,
    done_column: str,
    position: int,
) -> int:
    """Store lines that need no call, and the file's position after them, in one transaction."""
    stored = 0
    with session_scope(ctx.engine) as session:
        for read in group:
            try:
                stored += _store_plain(ctx, session, run, read, version)
            except UNREADABLE as exc:
                _skipped(run, exc)
        repo.lines_done(session, row.id, done_column, position)
    return stored


def _store_settled(
    ctx: Context,
    run: Run,
    row: LLMBatch,
    read: Line,
    version: str,
    schema: type[BaseModel],
    done_column: str,
    position: int,
) -> int:
    """Store a line whose answer needs a synchronous call (a repair, the rest of a cut-off
    answer). The call is made outside any transaction: a limiter wait plus the call can outlast
    the database's idle-in-transaction timeout, which would end the session, lose the line's
    progress and have every poll pay for the call again. Its answer, its calls and the file's
    position are stored together as soon as it is paid for."""
    with session_scope(ctx.engine) as session:
        try:
            found = settle_input(ctx, session, run, read, version)
        except UNREADABLE as exc:
            _skipped(run, exc)
            found = None
        if found is None:
            repo.lines_done(session, row.id, done_column, position)
            return 0
    target, messages = found
    calls: list[CallRecord] = []
    try:
        answer = settle(ctx, run, target, read, messages, schema, calls)
    except UNREADABLE as exc:
        _skipped(run, exc)
        answer = None
    with session_scope(ctx.engine) as session:
        stored = _save(ctx, session, run, target, version, answer, calls)
        repo.lines_done(session, row.id, done_column, position)
    return stored


def _skipped(run: Run, exc: BaseException) -> None:
    log.warning("run %s: a batch line was not stored (%s: %s)", run.id, type(exc).__name__, exc)


def _store_plain(ctx: Context, session: Session, run: Run, read: Line, version: str) -> int:
    """Store a line that validates as it is (or holds no answer) with its call."""
    target = target_of(ctx, session, run, read, version)
    if target is None or (reading := read.valid) is None:
        return 0
    calls: list[CallRecord] = []
    notes = f"mended: {'; '.join(reading.notes)}"[:500] if reading.notes else None
    sink_for(ctx, run, calls)(replace(target.record, error=notes))
    return _save(ctx, session, run, target, version, reading.value, calls)


def _save(
    ctx: Context,
    session: Session,
    run: Run,
    target: Target,
    version: str,
    answer: BaseModel | None,
    calls: list[CallRecord],
) -> int:
    """Store the answer on its chunk with the calls it cost; with no answer only the calls (what
    they cost stands; the chunk stays unanswered)."""
    rows = [call_row(ctx, run.id, target.document.id, target.chunk.idx, call) for call in calls]
    if answer is None:
        llm_calls.insert_calls(session, run.id, rows)
        return 0
    result = answer.model_dump(mode="json")
    return int(repo.store_answer(session, target.chunk.id, version, result, target.model, run.id, rows))
