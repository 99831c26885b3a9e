"""A batch output line read once: its answer (valid as it is, or needing a synchronous call),
the chunk of the run it answers and the call record it is paid for at batch prices."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from pipeline.context import Context
from pipeline.core import errors
from pipeline.core.cost import call_cost
from pipeline.extraction import custom
from pipeline.extraction.schemas import FilingExtraction
from pipeline.llm import lenient
from pipeline.llm.batch import OutputLine, parse_custom_id
from pipeline.llm.client import CallRecord
from pipeline.llm.request import cached_tokens_of
from pipeline.storage import batches as repo
from pipeline.storage import llm_calls
from pipeline.storage.models import Chunk, Document, Run

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Line:
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
    def of(cls, line: OutputLine, schema: type[BaseModel]) -> Line:
        if not line.answered or line.body is None:
            return cls(line, "", "stop", None)
        content, finish = _content(line.body)
        reading = lenient.read(content, schema, finish) if finish != "length" else None
        return cls(
            line, content, finish, reading if reading is not None and reading.value is not None else None
        )


@dataclass(frozen=True)
class Target:
    """The chunk of the run a line answers, and the line's own call (at batch prices)."""

    chunk: Chunk
    document: Document
    model: str
    record: CallRecord


UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, errors.PipelineError)
"""What a line that cannot be read raises: it is skipped (its chunk is asked again). A database
error is not among them: it fails the poll, which tries again."""


def target_of(ctx: Context, session: Session, run: Run, read: Line, version: str) -> Target | None:
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
        int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0),
        int(usage.get("completion_tokens") or usage.get("output_tokens") or 0),
    )
    cached = cached_tokens_of(usage)
    record = CallRecord(
        "extract",
        model,
        "ok",
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cached_tokens=cached,
        cost_usd=call_cost(ctx.settings.batch_prices(), model, prompt_tokens, completion_tokens, cached),
        mode="batch",
    )
    if chunk.result is not None and chunk.prompt_version == version:
        llm_calls.insert_calls(session, run.id, [call_row(ctx, run.id, doc.id, chunk.idx, record)])
        return None
    return Target(chunk, doc, model, record)


def call_row(ctx: Context, run_id: str, document_id: int, chunk_idx: int, call: CallRecord) -> dict[str, Any]:
    """A call's row; a batch call also says what its tokens would have cost synchronously."""
    sync_cost = None
    if call.mode == "batch":
        sync_cost = call_cost(
            ctx.settings.prices(), call.model, call.prompt_tokens, call.completion_tokens, call.cached_tokens
        )
    return llm_calls.call_values(run_id, document_id, chunk_idx, call, sync_cost)


def _content(body: dict[str, object]) -> tuple[str, str]:
    choices = body.get("choices") or []
    first = choices[0] if isinstance(choices, list) and choices else {}
    message = first.get("message") or {} if isinstance(first, dict) else {}
    content = message.get("content") if isinstance(message, dict) else None
    finish = first.get("finish_reason") if isinstance(first, dict) else None
    return str(content or ""), str(finish or "stop")


def schema_of(run: Run) -> type[BaseModel]:
    return custom.load_schema(run.schema) if run.schema else FilingExtraction
