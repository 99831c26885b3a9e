"""A run in batch mode: its chunks' requests go to the provider's Batch API at half price, and
whatever the batches have not answered by the time the deadline needs it goes synchronously.

The batch path only fills in chunk answers. Each output line is read as a synchronous answer
would be (validated, repaired once with a synchronous call, the rest of a cut-off answer asked
for) and stored on its chunk, with its call record at batch prices. When every chunk is answered
or out of batch tries, or when the deadline leaves just the time the synchronous path needs,
the run is handed to the synchronous path (`dispatch`): the run's usual chord, whose extract
tasks find the answers stored (as a retry does) and ask only for the rest, under the global
limiter; compression and synthesis follow as in any run.

One tick at a time per run polls, ingests and submits (`tick`): a worker task that sends
itself again every `PIPELINE_BATCH_POLL_S`, restarted by the workers' heartbeat when its chain is
lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from pipeline.context import Context, check_spend, stop_check
from pipeline.core import errors
from pipeline.core.cost import call_cost
from pipeline.extraction import custom
from pipeline.extraction.prompting import chunk_messages, prompt_version
from pipeline.extraction.schemas import FilingExtraction
from pipeline.llm import lenient, stops
from pipeline.llm.batch import (
    BatchAPI,
    BatchState,
    FileLimits,
    InputFile,
    OutputLine,
    Request,
    custom_id,
    pack,
    parse_custom_id,
)
from pipeline.llm.client import CallRecord, Completion
from pipeline.llm.prompts import Message
from pipeline.llm.ratelimit import Scope
from pipeline.llm.tokens import estimate_prompt
from pipeline.runs.mode import SAFETY, sync_estimate_s, work_estimate
from pipeline.storage import batches as repo
from pipeline.storage import clock, documents, llm_calls
from pipeline.storage.db import session_scope
from pipeline.storage.models import Chunk, Document, LLMBatch, Run, RunStatus, aware

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

LINES_PER_TRANSACTION = 100


def limits_in_force(ctx: Context) -> tuple[int, int]:
    """(rpm, tpm): the configured limits, or what the provider's headers said they are."""
    settings = ctx.settings
    rpm, tpm = settings.rate_limit_rpm, settings.rate_limit_tpm
    limiter = ctx.llm.limiter
    if limiter is not None:
        try:
            view = limiter.view(Scope(ctx.llm.endpoint, ctx.llm.model, 0))
            rpm, tpm = view.rpm_in_force or rpm, view.tpm_in_force or tpm
        except Exception as exc:  # Redis down: the configured limits stand
            log.debug("limits in force unknown: %s", exc)
    return rpm, tpm


def remaining_estimate_s(ctx: Context, run_id: str) -> float:
    """The synchronous path's time for what the run has not answered yet, and its report."""
    with session_scope(ctx.engine) as session:
        run = session.get(Run, run_id)
        version = prompt_version(run.schema if run else None)
        chunks, tokens, documents = repo.remaining_work(session, run_id, version)
    calls, total = work_estimate(ctx.settings, chunks, tokens, documents)
    return sync_estimate_s(calls, total, *limits_in_force(ctx))


def cutover_at(ctx: Context, run: Run) -> datetime | None:
    """When the run must leave the batch path to make its deadline (None: no deadline)."""
    if run.deadline is None:
        return None
    need = remaining_estimate_s(ctx, run.id) * SAFETY + ctx.settings.batch_deadline_margin_s
    return aware(run.deadline) - timedelta(seconds=need)


@dataclass
class Tick:
    """What one tick did and what comes next."""

    dispatch: bool = False
    """The run leaves the batch path: send its documents to the synchronous path now."""
    done: bool = False
    """Nothing more for the batch path to do (dispatched before, or the run is gone)."""
    submitted: int = 0
    ingested: int = 0


def tick(ctx: Context, run_id: str) -> Tick:
    """Advance the run's batches one step: each row to its next state, ended batches ingested,
    new files submitted while the enqueued-token budget allows, the deadline watched (on the
    database's clock: a cutover one host began, another goes on with). A cancelled run's
    batches are cancelled and what they answered before is ingested, nothing more is sent
    (`_wind_down`)."""
    with session_scope(ctx.engine) as session:
        run = session.get(Run, run_id)
        if run is None or run.dispatched_at is not None or run.mode != "batch":
            return Tick(done=True)
        repo.touch_poll(session, run_id)
        session.expunge(run)
    api = BatchAPI(ctx.settings.llm_base_url or "", ctx.settings.api_key_value(), ctx.settings.llm_timeout_s)
    try:
        with stops.checked_by(stop_check(ctx, run_id)):  # a cancelled run's repairs are not asked for
            if run.status == RunStatus.CANCELLED:
                return _wind_down(ctx, api, run)
            return _tick(ctx, api, run)
    finally:
        api.close()


def _wind_down(ctx: Context, api: BatchAPI, run: Run) -> Tick:
    """A cancelled run's batches: cancelled at the provider (`pipeline cancel` did so already,
    unless one was created as it ran), and the lines they answered before ingested, which were
    paid for (a retry reuses them; a line that needs a repair call is left unanswered). Done
    once none is open."""
    cancel_open_batches(ctx.engine, api, run.id, "run cancelled")
    outcome = Tick(ingested=_advance_rows(ctx, api, run, prompt_version(run.schema)))
    with session_scope(ctx.engine) as session:
        outcome.done = not repo.open_batches(session, run.id)
    return outcome


def _advance_rows(ctx: Context, api: BatchAPI, run: Run, version: str) -> int:
    """Each open batch row of the run moved on by one step; the lines ingested."""
    ingested = 0
    with session_scope(ctx.engine) as session:
        rows = repo.open_batches(session, run.id)
        session.expunge_all()
    for row in rows:
        try:
            ingested += _advance(ctx, api, run, row, version)
        except errors.PermanentError as exc:  # this batch cannot go on: its lines go elsewhere
            _give_up(ctx, run, row, str(exc))
        except Exception as exc:  # transient, or a bug: the other rows and the deadline go on
            log.warning(
                "run %s: batch row %s: %s: %s", run.id, row.id, type(exc).__name__, exc, exc_info=True
            )
            _count_failure(ctx, run, row, f"{type(exc).__name__}: {exc}")
    return ingested


def _tick(ctx: Context, api: BatchAPI, run: Run) -> Tick:
    """`tick` for a run on the batch path."""
    run_id = run.id
    outcome = Tick()
    version = prompt_version(run.schema)
    outcome.ingested = _advance_rows(ctx, api, run, version)
    # Once begun, the cutover goes on: what it ingests shortens the estimate, which must not
    # send the rest in a new batch.
    now = _now(ctx)
    deadline_due = run.cutover_at is not None or ((cut := cutover_at(ctx, run)) is not None and now >= cut)
    if deadline_due:
        outcome.dispatch = _cut_over(ctx, api, run, now)
    else:
        outcome.submitted = _submit(ctx, api, run, version)
        with session_scope(ctx.engine) as session:
            left = repo.still_to_send(session, run_id, version, ctx.settings.batch_line_attempts)
            open_rows = repo.open_batches(session, run_id)
        outcome.dispatch = not left and not open_rows
    if outcome.dispatch:
        log.info("run %s: the batch path is done, the rest goes synchronously", run_id)
    return outcome


def _now(ctx: Context) -> datetime:
    """The one clock (the database's), which a deadline's cutover is begun and timed on."""
    with session_scope(ctx.engine) as session:
        return clock.now(session)


ROW_FAILURES_MAX = 5
"""Polls in a row a batch may fail (the provider down, a file that cannot be read) before its
lines go to another batch or synchronously."""


def _count_failure(ctx: Context, run: Run, row: LLMBatch, reason: str) -> None:
    with session_scope(ctx.engine) as session:
        failures = repo.note_failure(session, row.id, reason)
    if failures >= ROW_FAILURES_MAX:
        _give_up(ctx, run, row, f"{failures} polls failed, the last: {reason}")


def _give_up(ctx: Context, run: Run, row: LLMBatch, reason: str) -> None:
    """The batch cannot go on: what it answered and was stored stays, its other lines go in
    another batch (their try counted) or synchronously."""
    log.warning("run %s: batch row %s given up: %s", run.id, row.id, reason)
    with session_scope(ctx.engine) as session:
        repo.update_row(session, row.id, error=reason)
        repo.release(session, row.id)


def dispatched(engine: Engine, run_id: str) -> bool:
    """Record that the run's chord was sent (after sending it: a chord sent twice changes
    nothing, a mark without a chord would leave the run waiting); True the first time."""
    with session_scope(engine) as session:
        return repo.mark_dispatched(session, run_id)


def documents_to_extract(engine: Engine, run_id: str) -> list[int]:
    """The run's documents the synchronous path has to finish, longest first (the stored
    answers make most of them quick)."""
    with session_scope(engine) as session:
        return repo.unfinished_documents(session, run_id)


@dataclass
class BatchCancels:
    """What cancelling a run's open batches did."""

    cancelled: list[str] = field(default_factory=list)
    """The provider's ids of the batches cancelled now."""
    failed: list[str] = field(default_factory=list)
    """Batches the provider could not be asked to cancel: "<id>: <error>"."""
    waiting: bool = False
    """Some batch has not ended yet (still cancelling, or its cancel failed)."""


def cancel_open_batches(engine: Engine, api: BatchAPI, run_id: str, why: str) -> BatchCancels:
    """Cancel what the provider still holds of the run's batches (the lines they completed come
    back all the same, in their output files), and free the chunks of batches not at the
    provider yet. Safe to repeat: a batch cancelling or ended is left as it is."""
    with session_scope(engine) as session:
        rows = repo.open_batches(session, run_id)
        session.expunge_all()
    done = BatchCancels()
    for row in rows:
        if row.status in ("validating", "in_progress", "finalizing") and row.provider_batch_id:
            try:
                state = _cancel_one(api, row.provider_batch_id)
            except errors.PipelineError as exc:
                log.warning("run %s: cancelling batch %s: %s", run_id, row.provider_batch_id, exc)
                done.failed.append(f"{row.provider_batch_id}: {exc}")
                done.waiting = True
                continue
            log.info("run %s: %s: batch %s cancelled (%s)", run_id, why, row.provider_batch_id, state.status)
            with session_scope(engine) as session:
                repo.update_row(session, row.id, status=state.status, stamp=("cancelled_at",), failures=0)
            done.cancelled.append(row.provider_batch_id)
            done.waiting = done.waiting or not state.ended
        elif row.status in repo.WAITING:
            done.waiting = True
        elif row.status in (repo.PREPARING, repo.UPLOADED):
            # Not at the provider yet: its chunks go synchronously (or nowhere, once cancelled).
            with session_scope(engine) as session:
                repo.release(session, row.id)
    return done


def _cancel_one(api: BatchAPI, batch_id: str) -> BatchState:
    """Cancel the batch; one that another process cancelled meanwhile (the run's poll and
    `pipeline cancel` both do) is refused by the provider (409): its state is read instead."""
    try:
        return api.cancel(batch_id)
    except errors.BatchRefused:
        state = api.retrieve(batch_id)
        if state.status != "cancelling" and not state.ended:
            raise
        return state


def _cut_over(ctx: Context, api: BatchAPI, run: Run, now: datetime) -> bool:
    """The deadline needs the synchronous path now: cancel what the provider still holds (its
    completed lines come back all the same) and hand over once the cancels ended, or once
    waiting for them would cost the deadline its margin."""
    waiting = cancel_open_batches(ctx.engine, api, run.id, "deadline").waiting
    with session_scope(ctx.engine) as session:
        fresh = session.get(Run, run.id)
        started = aware(fresh.cutover_at) if fresh and fresh.cutover_at else now
        if fresh is not None and fresh.cutover_at is None:
            fresh.cutover_at = now
    if waiting and (now - started).total_seconds() < ctx.settings.batch_cancel_wait_s:
        return False
    if waiting:
        log.warning("run %s: the cancelled batches did not end in time: going on without them", run.id)
    return True


def _advance(ctx: Context, api: BatchAPI, run: Run, row: LLMBatch, version: str) -> int:
    """Move one batch row on by one step; returns the lines it ingested."""
    if row.status == repo.PREPARING:
        _upload(ctx, api, row, version, run)
        return 0
    if row.status == repo.UPLOADED:
        _create(ctx, api, row, run)
        return 0
    if not row.provider_batch_id:
        return 0
    state = api.retrieve(row.provider_batch_id)
    with session_scope(ctx.engine) as session:
        repo.update_row(
            session,
            row.id,
            status=state.status,
            completed=state.completed,
            failed=state.failed,
            output_file_id=state.output_file_id,
            error_file_id=state.error_file_id,
            error=state.errors,
            stamp=("ended_at",) if state.ended and row.ended_at is None else (),
            **({"failures": 0} if (state.status, state.completed) != (row.status, row.completed) else {}),
        )
    if not state.ended:
        return 0
    if state.token_limit:
        log.info("run %s: batch %s refused on the enqueued-token limit: its lines go again", run.id, state.id)
    ingested = _ingest(ctx, api, run, row, state, version)
    with session_scope(ctx.engine) as session:
        held = repo.release(session, row.id)
    log.info("run %s: batch %s %s: %d of its %d lines stored", run.id, state.id, state.status, ingested, held)
    if not ctx.settings.batch_keep_files:
        _delete_files(api, run, [row.input_file_id, state.output_file_id, state.error_file_id])
    return ingested


def _delete_files(api: BatchAPI, run: Run, file_ids: list[str | None]) -> None:
    """Delete an ingested batch's files at the provider, which keeps them (and counts them
    against the organization's storage) until they are. Best effort: a file left behind costs
    storage, not answers."""
    for file_id in filter(None, file_ids):
        try:
            api.delete_file(file_id)
        except errors.PipelineError as exc:
            log.warning("run %s: batch file %s not deleted: %s", run.id, file_id, exc)


def _requests(ctx: Context, run: Run, pending: Iterator[repo.Pending], version: str) -> Iterator[Request]:
    for item in pending:
        messages, answer_model = chunk_messages(item.chunk, item.text, item.document.chunk_count, run.schema)
        model = ctx.llm.pick_model("extract", 0)
        body, asked = ctx.llm.batch_body(messages, answer_model, model, ctx.settings.extract_max_tokens)
        tokens = estimate_prompt(model, asked) + ctx.settings.extract_max_tokens
        yield Request(item.chunk.id, custom_id(item.chunk.id, version, model), body, tokens)


def _submit(ctx: Context, api: BatchAPI, run: Run, version: str) -> int:
    """Send new input files while the run has chunks to send and the budget room; returns the
    requests sent."""
    settings = ctx.settings
    sent = 0
    while True:
        with session_scope(ctx.engine) as session:
            room = settings.batch_max_enqueued_tokens - repo.enqueued_tokens(session, run.id)
            if settings.batch_max_enqueued_tokens and room <= 0:
                return sent
            limits = FileLimits(
                settings.batch_max_requests,
                settings.batch_max_file_bytes,
                room if settings.batch_max_enqueued_tokens else 0,
            )
            reuse = ctx.llm.extract_model_names() if run.reuse_answers and not run.schema else None
            pending = repo.pending_chunks(
                session, run.id, version, settings.batch_line_attempts, reuse_models=reuse
            )
            packed, over = pack(_requests(ctx, run, pending, version), limits)
            if not packed.chunk_ids:
                packed.close()
                if over is not None and not _room_taken(session, run):
                    # Alone bigger than a file or the enqueued-token budget: it goes synchronously.
                    repo.out_of_tries(session, over.chunk_id, settings.batch_line_attempts)
                    continue
                return sent
            row = repo.create(session, run.id, packed.chunk_ids, packed.tokens)
            row_id = row.id
            session.flush()
            session.expunge(row)
        try:
            _send_file(ctx, api, row, packed, run)
        finally:
            packed.close()
        sent += len(packed.chunk_ids)
        log.info(
            "run %s: batch row %s: %d requests, %d tokens sent",
            run.id,
            row_id,
            len(packed.chunk_ids),
            packed.tokens,
        )


def _room_taken(session: Session, run: Run) -> bool:
    """Batches of the run hold enqueued tokens: a request may fit once they end."""
    return repo.enqueued_tokens(session, run.id) > 0


def _upload(ctx: Context, api: BatchAPI, row: LLMBatch, version: str, run: Run) -> None:
    """A row whose upload a crash interrupted: its file is built again from its chunks."""
    with session_scope(ctx.engine) as session:
        items = repo.chunks_of_batch(session, row.id)
    packed, _ = pack(_requests(ctx, run, iter(items), version), FileLimits(len(items) or 1, 1 << 62, 0))
    try:
        _send_file(ctx, api, row, packed, run)
    finally:
        packed.close()


def _send_file(ctx: Context, api: BatchAPI, row: LLMBatch, packed: InputFile, run: Run) -> None:
    """Upload the row's input file and create its batch. The attempt is counted before the
    upload: a row whose upload began before (a crash) looks for that file first."""
    name = repo.filename(row)
    file_id = api.find_upload(name) if row.attempts else None
    with session_scope(ctx.engine) as session:
        repo.update_row(session, row.id, attempts=row.attempts + 1)
    if file_id is None:
        file_id = api.upload(packed, name)
    with session_scope(ctx.engine) as session:
        repo.update_row(session, row.id, status=repo.UPLOADED, input_file_id=file_id, failures=0)
    row.input_file_id, row.status, row.attempts = file_id, repo.UPLOADED, row.attempts + 1
    _create(ctx, api, row, run, look_first=False)


def _create(ctx: Context, api: BatchAPI, row: LLMBatch, run: Run, *, look_first: bool = True) -> None:
    """Create the batch of the row's uploaded file; `look_first`: an earlier tick may have
    created it and died before storing its id, so a batch of this input file is looked for."""
    assert row.input_file_id
    state = api.find_batch(row.input_file_id) if look_first else None
    if state is None:
        state = api.create(row.input_file_id, {"pipeline_run": run.id, "pipeline_batch": str(row.id)})
    with session_scope(ctx.engine) as session:
        repo.update_row(
            session,
            row.id,
            provider_batch_id=state.id,
            status=state.status,
            stamp=("submitted_at",),
            failures=0,
        )


def _ingest(ctx: Context, api: BatchAPI, run: Run, row: LLMBatch, state: BatchState, version: str) -> int:
    """Store the answers of an ended batch's output and error files, line by line, resuming
    after the lines a crashed ingestion committed (a file's lines come in the same order each
    time it is read). Lines that need no call commit in groups; a line that needs a
    synchronous call commits alone, right after its call (`_store_settled`)."""
    stored = 0
    schema = _schema(run)
    for file_id, done_column in (
        (state.output_file_id, "output_lines_done"),
        (state.error_file_id, "error_lines_done"),
    ):
        if not file_id:
            continue
        skip = int(getattr(row, done_column) or 0)
        group: list[_Line] = []
        position = 0
        for line in api.lines(file_id):
            position += 1
            if position <= skip:
                continue
            read = _Line.of(line, schema)
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


@dataclass(frozen=True)
class _Line:
    """An output line with its answer read once: `valid` holds the answer when it validates as
    it is (mended as models need), None when it needs a synchronous call or holds none."""

    line: OutputLine
    content: str
    finish: str
    valid: lenient.Reading[BaseModel] | None

    @property
    def plain(self) -> bool:
        """No synchronous call is needed (it validates as it is, or it holds no answer)."""
        return self.valid is not None or not self.line.answered or self.line.body is None

    @classmethod
    def of(cls, line: OutputLine, schema: type[BaseModel]) -> _Line:
        if not line.answered or line.body is None:
            return cls(line, "", "stop", None)
        content, finish = _content(line.body)
        reading = lenient.read(content, schema, finish) if finish != "length" else None
        return cls(
            line, content, finish, reading if reading is not None and reading.value is not None else None
        )


@dataclass(frozen=True)
class _Target:
    """The chunk of the run a line answers, and the line's own call (at batch prices)."""

    chunk: Chunk
    document: Document
    model: str
    record: CallRecord


_UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, errors.PipelineError)
"""What a line that cannot be read raises: it is skipped (its chunk is asked again). A database
error is not among them: it fails the poll, which tries again."""


def _store_group(
    ctx: Context,
    run: Run,
    row: LLMBatch,
    group: list[_Line],
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
            except _UNREADABLE as exc:
                _skipped(run, exc)
        repo.lines_done(session, row.id, done_column, position)
    return stored


def _store_settled(
    ctx: Context,
    run: Run,
    row: LLMBatch,
    read: _Line,
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
            found = _settle_input(ctx, session, run, read, version)
        except _UNREADABLE as exc:
            _skipped(run, exc)
            found = None
        if found is None:
            repo.lines_done(session, row.id, done_column, position)
            return 0
    target, messages = found
    calls: list[CallRecord] = []
    try:
        answer = _settle(ctx, run, target, read, messages, schema, calls)
    except _UNREADABLE as exc:
        _skipped(run, exc)
        answer = None
    with session_scope(ctx.engine) as session:
        stored = _save(ctx, session, run, target, version, answer, calls)
        repo.lines_done(session, row.id, done_column, position)
    return stored


def _skipped(run: Run, exc: BaseException) -> None:
    log.warning("run %s: a batch line was not stored (%s: %s)", run.id, type(exc).__name__, exc)


def _target(ctx: Context, session: Session, run: Run, read: _Line, version: str) -> _Target | None:
    """The chunk of the run the line answers, still unanswered. None when there is nothing to
    store: a line naming no chunk of ours, an error line or an answer to an older prompt (the
    chunk is asked again), a chunk answered meanwhile by the synchronous path (the line's call
    is recorded: it was paid for all the same)."""
    line = read.line
    named = parse_custom_id(line.custom_id)
    if named is None:
        log.warning("run %s: a batch line names no chunk of ours: %r", run.id, line.custom_id[:80])
        return None
    chunk_id, line_version, model = named
    if line_version != version or not line.answered or line.body is None:
        return None
    found = repo.chunk_owner(session, chunk_id)
    if found is None or found[1].run_id != run.id:
        return None
    chunk, doc = found
    usage = line.body.get("usage") or {}
    prompt_tokens, completion_tokens = (
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
    )
    record = CallRecord(
        "extract",
        model,
        "ok",
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=call_cost(ctx.settings.batch_prices(), model, prompt_tokens, completion_tokens),
        mode="batch",
    )
    if chunk.result is not None and chunk.prompt_version == version:
        llm_calls.insert_calls(session, run.id, [_call_row(ctx, run.id, doc.id, chunk.idx, record)])
        return None
    return _Target(chunk, doc, model, record)


def _store_plain(ctx: Context, session: Session, run: Run, read: _Line, version: str) -> int:
    """Store a line that validates as it is (or holds no answer) with its call."""
    target = _target(ctx, session, run, read, version)
    if target is None or (reading := read.valid) is None:
        return 0
    calls: list[CallRecord] = []
    notes = f"mended: {'; '.join(reading.notes)}"[:500] if reading.notes else None
    _sink(ctx, run, calls)(replace(target.record, error=notes))
    return _save(ctx, session, run, target, version, reading.value, calls)


def _settle_input(
    ctx: Context, session: Session, run: Run, read: _Line, version: str
) -> tuple[_Target, list[Message]] | None:
    """The line's chunk and the chunk's prompt, which the synchronous call repeats."""
    target = _target(ctx, session, run, read, version)
    if target is None:
        return None
    text = documents.document_text(session, target.document)
    messages, _ = chunk_messages(target.chunk, text, target.document.chunk_count, run.schema)
    return target, messages


def _settle(
    ctx: Context,
    run: Run,
    target: _Target,
    read: _Line,
    messages: list[Message],
    schema: type[BaseModel],
    calls: list[CallRecord],
) -> BaseModel | None:
    """The line's answer after the synchronous calls it needs (their records, and the line's,
    go to `calls`); None when it still fails (its chunk is asked synchronously later). Called
    with no transaction open."""
    sink = _sink(ctx, run, calls)
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


def _sink(ctx: Context, run: Run, calls: list[CallRecord]) -> Callable[[CallRecord], None]:
    """Where a line's calls go: `calls`, each cost also counted against a capped run's budget."""
    return ctx.llm.spending(run.id, calls.append) if run.budget_usd is not None else calls.append


def _save(
    ctx: Context,
    session: Session,
    run: Run,
    target: _Target,
    version: str,
    answer: BaseModel | None,
    calls: list[CallRecord],
) -> int:
    """Store the answer on its chunk with the calls it cost; with no answer only the calls (what
    they cost stands; the chunk stays unanswered)."""
    rows = [_call_row(ctx, run.id, target.document.id, target.chunk.idx, call) for call in calls]
    if answer is None:
        llm_calls.insert_calls(session, run.id, rows)
        return 0
    result = answer.model_dump(mode="json")
    return int(repo.store_answer(session, target.chunk.id, version, result, target.model, run.id, rows))


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


def _call_row(
    ctx: Context, run_id: str, document_id: int, chunk_idx: int, call: CallRecord
) -> dict[str, Any]:
    """A call's row; a batch call also says what its tokens would have cost synchronously."""
    sync_cost = None
    if call.mode == "batch":
        sync_cost = call_cost(ctx.settings.prices(), call.model, call.prompt_tokens, call.completion_tokens)
    return llm_calls.call_values(run_id, document_id, chunk_idx, call, sync_cost)


def _content(body: dict[str, object]) -> tuple[str, str]:
    choices = body.get("choices") or []
    first = choices[0] if isinstance(choices, list) and choices else {}
    message = first.get("message") or {} if isinstance(first, dict) else {}
    content = message.get("content") if isinstance(message, dict) else None
    finish = first.get("finish_reason") if isinstance(first, dict) else None
    return str(content or ""), str(finish or "stop")


def _schema(run: Run) -> type[BaseModel]:
    return custom.load_schema(run.schema) if run.schema else FilingExtraction
