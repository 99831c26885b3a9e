"""Partial syntheses: a run's summaries taken in batches while the run still extracts.

A batch is claimed by pointing its extractions at a new `synthesis_partials` row; a summary is
in at most one partial. A partial without text (its call failed, or its worker died) covers
nothing: the final synthesis reads its documents' summaries instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Row, delete, func, select, update
from sqlalchemy.orm import Session

from pipeline.core.constants import CHARS_PER_TOKEN
from pipeline.storage import clock
from pipeline.storage.fit import fitted
from pipeline.storage.models import Extraction, Report, Run, SynthesisPartial


@dataclass(frozen=True)
class Claim:
    partial_id: int
    run_id: str
    query: str
    budget_usd: float | None
    summaries: list[str]


def claim_batch(session: Session, document_id: int, min_tokens: int, max_tokens: int) -> int | None:
    """Claim the summaries of the document's run that no partial holds, in the order they came,
    once they add up to `min_tokens` (up to `max_tokens`); the new partial's id (`load_claim`
    reads what it holds), None while they do not.

    Rows another transaction is claiming are skipped (Postgres), so two claims never wait for
    each other; a claim that finds its rows taken meanwhile (SQLite) claims nothing."""
    run_id = select(Extraction.run_id).where(Extraction.document_id == document_id).scalar_subquery()
    unclaimed = (
        select(Extraction.id, func.length(Extraction.summary), Extraction.run_id)
        .where(Extraction.run_id == run_id, Extraction.partial_id.is_(None), Extraction.summary.is_not(None))
        .order_by(Extraction.id)
    )
    if _batch(session.execute(unclaimed).all(), min_tokens, max_tokens) is None:
        return None  # the common case, without a lock
    rows = session.execute(unclaimed.with_for_update(skip_locked=True)).all()
    ids = _batch(rows, min_tokens, max_tokens)
    if ids is None:
        return None
    partial = SynthesisPartial(run_id=rows[0].run_id, documents=len(ids), created_at=clock.now(session))
    session.add(partial)
    session.flush()
    taken = session.execute(
        update(Extraction)
        .where(Extraction.id.in_(ids), Extraction.partial_id.is_(None))
        .values(partial_id=partial.id)
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if taken < 2:
        session.rollback()
        return None
    partial.documents = taken
    return partial.id


def _batch(rows: Sequence[Row[tuple[int, int, str]]], min_tokens: int, max_tokens: int) -> list[int] | None:
    """The first rows (id, characters, run) up to `max_tokens`, when they reach `min_tokens`."""
    ids: list[int] = []
    tokens = 0
    for extraction_id, chars, _ in rows:
        cost = -(-int(chars) // CHARS_PER_TOKEN)
        if ids and tokens + cost > max_tokens:
            break
        ids.append(extraction_id)
        tokens += cost
    return ids if tokens >= min_tokens and len(ids) >= 2 else None


def load_claim(session: Session, partial_id: int) -> Claim | None:
    """The partial's run and summaries, while it waits for its text (None: it has its text, was
    given back, or its run has its report already)."""
    row = session.execute(
        select(SynthesisPartial.run_id, SynthesisPartial.text, Run.query, Run.budget_usd)
        .join(Run, Run.id == SynthesisPartial.run_id)
        .where(SynthesisPartial.id == partial_id)
    ).one_or_none()
    if (
        row is None
        or row.text is not None
        or session.scalar(select(Report.id).where(Report.run_id == row.run_id))
    ):
        return None
    summaries = session.scalars(
        select(Extraction.summary).where(Extraction.partial_id == partial_id).order_by(Extraction.id)
    ).all()
    return Claim(partial_id, row.run_id, row.query, row.budget_usd, [s for s in summaries if s])


def complete(session: Session, partial_id: int, text: str) -> None:
    fitted_text = fitted(SynthesisPartial, {"text": text})
    session.execute(update(SynthesisPartial).where(SynthesisPartial.id == partial_id).values(**fitted_text))


def release(session: Session, partial_id: int) -> None:
    """Give the partial's summaries back (its call failed): a later batch or the final synthesis
    takes them."""
    session.execute(
        update(Extraction)
        .where(Extraction.partial_id == partial_id)
        .values(partial_id=None)
        .execution_options(synchronize_session=False)
    )
    session.execute(delete(SynthesisPartial).where(SynthesisPartial.id == partial_id))


def close(session: Session, run_id: str) -> int:
    """The final synthesis takes every summary of the run that no partial holds, under a partial
    of its own with an empty text (so `report_rows.summaries` reads them, and no wait counts it
    as pending, a retry's included): a partial claimed by the
    run's last documents after the final synthesis read the summaries would otherwise put
    those summaries in the report twice. Returns that partial's id."""
    closing = SynthesisPartial(
        run_id=run_id, documents=0, text="", created_at=clock.now(session)
    )  # answered by none, waited for by none
    session.add(closing)
    session.flush()
    closing.documents = session.execute(
        update(Extraction)
        .where(Extraction.run_id == run_id, Extraction.partial_id.is_(None))
        .values(partial_id=closing.id)
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    return closing.id


def pending(session: Session, run_id: str, made_after: datetime) -> list[tuple[int, datetime]]:
    """The run's partials made after `made_after` that have no text yet (their call runs; the
    final synthesis's own, from `close`, has an empty one): (id, made at)."""
    rows = session.execute(
        select(SynthesisPartial.id, SynthesisPartial.created_at).where(
            SynthesisPartial.run_id == run_id,
            SynthesisPartial.text.is_(None),
            SynthesisPartial.created_at > made_after,
        )
    )
    return [(int(partial_id), made) for partial_id, made in rows.tuples()]


def completed(session: Session, run_id: str) -> dict[int, str]:
    """The run's partials that have text, by id (in the order they were made)."""
    rows = session.execute(
        select(SynthesisPartial.id, SynthesisPartial.text)
        .where(SynthesisPartial.run_id == run_id, SynthesisPartial.text.is_not(None))
        .order_by(SynthesisPartial.id)
    ).all()
    return {partial_id: text for partial_id, text in rows if text}
