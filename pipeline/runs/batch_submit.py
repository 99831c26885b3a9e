"""A batch run's input files: the chunks still to send packed into files within the provider's
limits and the enqueued-token budget, each file's row written before its upload, then the file
uploaded and its batch created. A crash between two steps leaves a row that says which step to
do again (`upload_again`, `create_batch`), and neither step is done twice at the provider."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.context import Context
from pipeline.core import constants as c
from pipeline.core.cost import price_of
from pipeline.extraction.prompting import cache_key, chunk_messages
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
        messages, answer_model = chunk_messages(
            item.chunk, item.text, item.document.chunk_count, run.schema, doc=item.document, version=version
        )
        model = ctx.llm.pick_model("extract", 0)
        key = cache_key(item.document, version)
        body, asked = ctx.llm.batch_body(messages, answer_model, model, ctx.settings.extract_max_tokens, key)
        tokens = estimate_prompt(model, asked) + ctx.settings.extract_max_tokens
        yield Request(item.chunk.id, custom_id(item.chunk.id, version, model), body, tokens)


@dataclass
class Sent:
    """What one round of `submit` sent."""

    requests: int = 0
    over_budget: bool = False
    """The run's budget has no room for another line, and no open batch holds any of it: the
    batch path is done, and what is left goes to the synchronous path, whose budget check
    fails what it cannot pay for."""


def submit(ctx: Context, api: BatchAPI, run: Run, version: str) -> Sent:
    """Send new input files while the run has chunks to send, the enqueued-token budget room
    and, for a run with a budget, the money: a file is sent only when what it may cost at most
    (`file_cost`) fits what the budget has left beyond the recorded cost and the open batches'
    own estimates. Returns what was sent."""
    settings = ctx.settings
    sent = Sent()
    max_requests = settings.batch_max_requests
    while True:
        with session_scope(ctx.engine) as session:
            room = settings.batch_max_enqueued_tokens - repo.enqueued_tokens(session, run.id)
            if settings.batch_max_enqueued_tokens and room <= 0:
                return sent
            limits = FileLimits(
                max_requests,
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
            cost = file_cost(ctx, packed)
            money = repo.budget_room(session, run.id)
            if money is not None and cost is not None and cost > money[0]:
                packed.close()
                lines = int(len(packed.chunk_ids) * max(0.0, money[0]) / cost)
                if lines >= 1:
                    max_requests = lines  # a smaller file fits
                    continue
                sent.over_budget = not money[1]  # else: wait for the open batches' actual cost
                log.info(
                    "run %s: the budget has $%.4f left, less than a batch line may cost: %s",
                    run.id,
                    money[0],
                    "the rest goes synchronously" if sent.over_budget else "waiting for the open batches",
                )
                return sent
            row = repo.create(session, run.id, packed.chunk_ids, packed.tokens, cost)
            row_id = row.id
            session.flush()
            session.expunge(row)
        try:
            _send_file(ctx, api, row, packed, run)
        finally:
            packed.close()
        sent.requests += len(packed.chunk_ids)
        log.info(
            "run %s: batch row %s: %d requests, %d tokens, at most $%s sent",
            run.id,
            row_id,
            len(packed.chunk_ids),
            packed.tokens,
            "?" if cost is None else f"{cost:.4f}",
        )


def file_cost(ctx: Context, packed: InputFile) -> float | None:
    """What the file's lines may cost at most, at batch prices: their prompts, and every line's
    max_tokens answered (None: the model has no price)."""
    price = price_of(ctx.settings.batch_prices(), ctx.llm.pick_model("extract", 0))
    if price is None:
        return None
    answers = len(packed.chunk_ids) * ctx.settings.extract_max_tokens
    return price.of(max(0, packed.tokens - answers), answers)


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
