"""Second answers of a chunk (the verification sample's and the escalation's: the chunk's own
prompt asked again of another model, or of the same one sampled), kept with the chunk's answer so
that a retried or redelivered document, or a later run of the same text, does not pay for them
again.

They live in the chunk's `result`, under SECOND_ANSWERS, by model and temperature (the prompt is
the chunk's own, of its `prompt_version`): no table of their own, so no migration. A new answer
to the chunk (another prompt version) replaces the whole `result`, and its second answers with it;
answer reuse across runs (`documents.reuse_answers`) copies them with it. Readers of the chunk's
answer take `first_answer(result)`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from pipeline.storage.document_leases import hold
from pipeline.storage.models import Chunk

SECOND_ANSWERS = "_second_answers"


def first_answer(result: dict[str, Any]) -> dict[str, Any]:
    """The chunk's own answer, without its second answers."""
    return {key: value for key, value in result.items() if key != SECOND_ANSWERS}


def _key(model: str, temperature: float) -> str:
    return f"{model}@{temperature:g}"


def stored(chunk: Chunk, model: str, temperature: float) -> dict[str, Any] | None:
    """The second answer `model` gave the chunk at `temperature`, if one is kept."""
    kept = (chunk.result or {}).get(SECOND_ANSWERS) or {}
    found = kept.get(_key(model, temperature))
    return found if isinstance(found, dict) else None


def save(
    session: Session, chunk: Chunk, fence: int, model: str, temperature: float, answer: dict[str, Any]
) -> None:
    """Keep a second answer with the chunk's, if lease `fence` still holds its document (the
    holder is the one writer: the row's `result`, read under its lock, loses nothing)."""
    hold(session, chunk.document_id, fence)
    result = dict(session.scalar(select(Chunk.result).where(Chunk.id == chunk.id)) or {})
    result[SECOND_ANSWERS] = {**(result.get(SECOND_ANSWERS) or {}), _key(model, temperature): answer}
    session.execute(update(Chunk).where(Chunk.id == chunk.id).values(result=result))
    chunk.result = result  # the detached row the document's assessment reads
