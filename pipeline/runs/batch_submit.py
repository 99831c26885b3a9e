"""A batch run's input files: the chunks still to send packed into files within the provider's
limits and the enqueued-token budget, each file's row written before its upload, then the file
uploaded and its batch created. A crash between two steps leaves a row that says which step to
do again (`upload_again`, `create_batch`), and neither step is done twice at the provider."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pipeline.context import Context
from pipeline.core import constants as c
from pipeline.extraction.prompting import chunk_messages
from pipeline.llm.batch import BatchAPI, FileLimits, InputFile, Request, custom_id, pack
from pipeline.llm.tokens import estimate_prompt
from pipeline.storage import batches as repo
from pipeline.storage.db import session_scope
from pipeline.storage.models import LLMBatch, Run

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)


def _requests(ctx: Context, run: Run, pending: Iterator[repo.Pending], version: str) -> Iterator[Request]:
    for item in pending:
        messages, answer_model = chunk_messages(item.chunk, item.text, item.document.chunk_count, run.schema)
        model = ctx.llm.pick_model("extract", 0)
        body, asked = ctx.llm.batch_body(messages, answer_model, model, ctx.settings.extract_max_tokens)
        tokens = estimate_prompt(model, asked) + ctx.settings.extract_max_tokens
        yield Request(item.chunk.id, custom_id(item.chunk.id, version, model), body, tokens)


def submit(ctx: Context, api: BatchAPI, run: Run, version: str) -> int:
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
                c.BATCH_MAX_FILE_BYTES,
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


def upload_again(ctx: Context, api: BatchAPI, row: LLMBatch, version: str, run: Run) -> None:
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
    create_batch(ctx, api, row, run, look_first=False)


def create_batch(ctx: Context, api: BatchAPI, row: LLMBatch, run: Run, *, look_first: bool = True) -> None:
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
