"""The review loop's rows: a run's low-confidence fields (what `pipeline review export` lists),
what an import checks its keys against, the corrections it stores, and the reviewed values
`pipeline review truth` writes.

A correction is never updated or deleted here: the newest per field wins in the views
(`reviewed_extractions`, `reviewed_risk_factors`), and the older ones say who said what before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import func, insert, or_, select
from sqlalchemy.orm import Session

from pipeline.storage import clock
from pipeline.storage.db import MAX_IDS_PER_STATEMENT
from pipeline.storage.models import Content, Correction, Document, Extraction, RiskFactor, XbrlFact, table_of

SCALAR_FIELDS = ("company", "fiscal_year", "revenue_usd")
"""The extraction's fields a review may correct, besides each risk factor's title."""
RISK_FIELD = "risk_title"


@dataclass(frozen=True)
class FieldRow:
    """One field of an extraction, as the model answered it, with its confidence and evidence."""

    document_id: int
    path: str
    sha256: str | None
    field: str
    position: int | None
    """The risk factor's position (risk_title only)."""
    value: str | int | float | None
    confidence: float
    match: str | None
    """How its quote was found (revenue, risks); None for company and fiscal year."""
    quote: str | None
    quote_start: int | None
    quote_end: int | None
    filed: float | None = None
    """What the filing's own inline XBRL states for the field (revenue), beside the model's value."""
    filed_concept: str | None = None


def fields_below(session: Session, run_id: str, below: float) -> list[FieldRow]:
    """Every field of the run's extractions whose confidence is below `below`, by document
    (fields without a confidence, as a user's schema leaves them, are not listed)."""
    e = Extraction
    scalars = session.execute(
        select(
            e.document_id,
            Document.path,
            Document.sha256,
            e.company,
            e.company_confidence,
            e.fiscal_year,
            e.fiscal_year_confidence,
            e.revenue_usd,
            e.revenue_confidence,
            e.revenue_match,
            e.revenue_quote,
            e.revenue_quote_start,
            e.revenue_quote_end,
            XbrlFact.value,
            XbrlFact.concept,
        )
        .join(Document, Document.id == e.document_id)
        .outerjoin(
            XbrlFact,
            (XbrlFact.document_id == e.document_id)
            & (XbrlFact.run_id == e.run_id)
            & (XbrlFact.field == "revenue_usd"),
        )
        .where(
            e.run_id == run_id,
            or_(
                e.company_confidence < below,
                e.fiscal_year_confidence < below,
                e.revenue_confidence < below,
            ),
        )
        .order_by(e.document_id)
    ).all()
    rows: list[FieldRow] = []
    for r in scalars:
        common = (r.document_id, r.path, r.sha256)
        if r.company_confidence is not None and r.company_confidence < below:
            rows.append(
                FieldRow(*common, "company", None, r.company, r.company_confidence, None, None, None, None)
            )
        if r.fiscal_year_confidence is not None and r.fiscal_year_confidence < below:
            rows.append(
                FieldRow(
                    *common,
                    "fiscal_year",
                    None,
                    r.fiscal_year,
                    r.fiscal_year_confidence,
                    None,
                    None,
                    None,
                    None,
                )
            )
        if r.revenue_confidence is not None and r.revenue_confidence < below:
            rows.append(
                FieldRow(
                    *common,
                    "revenue_usd",
                    None,
                    r.revenue_usd,
                    r.revenue_confidence,
                    r.revenue_match,
                    r.revenue_quote,
                    r.revenue_quote_start,
                    r.revenue_quote_end,
                    r.value,
                    r.concept,
                )
            )
    risks = session.execute(
        select(
            RiskFactor.document_id,
            Document.path,
            Document.sha256,
            RiskFactor.position,
            RiskFactor.title,
            RiskFactor.confidence,
            RiskFactor.match,
            RiskFactor.quote,
            RiskFactor.quote_start,
            RiskFactor.quote_end,
        )
        .join(Document, Document.id == RiskFactor.document_id)
        .where(RiskFactor.run_id == run_id, RiskFactor.confidence < below)
        .order_by(RiskFactor.document_id, RiskFactor.position)
    ).all()
    rows.extend(FieldRow(r[0], r[1], r[2], RISK_FIELD, *r[3:]) for r in risks)
    return rows


def unscored_extractions(session: Session, run_id: str) -> int:
    """How many of the run's extractions have no confidence at all (a user's schema, or stored
    before confidence was scored): what an empty export should mention."""
    return (
        session.scalar(
            select(func.count())
            .select_from(Extraction)
            .where(
                Extraction.run_id == run_id,
                Extraction.company_confidence.is_(None),
                Extraction.fiscal_year_confidence.is_(None),
                Extraction.revenue_confidence.is_(None),
            )
        )
        or 0
    )


def filing_text(session: Session, sha256: str | None) -> tuple[str | None, list[list[int]]]:
    """A filing's text (None: no content, or `pipeline prune` dropped it), and its map back to
    the source file ([offset in the text, byte in the file] per line; [] for plain text)."""
    if sha256 is None:
        return None, []
    row = session.execute(
        select(Content.text, Content.source_offsets).where(Content.sha256 == sha256)
    ).one_or_none()
    return (row[0], list(row[1] or [])) if row else (None, [])


@dataclass
class Target:
    """What an import checks a correction's key against: the document's run and path, whether
    it has an extraction, and its risk factors' positions."""

    run_id: str
    path: str
    extracted: bool = False
    risk_positions: set[int] = field(default_factory=set)


def targets(session: Session, document_ids: Iterable[int]) -> dict[int, Target]:
    """The documents among `document_ids` that exist, by id."""
    ids = sorted(set(document_ids))
    found: dict[int, Target] = {}
    for start in range(0, len(ids), MAX_IDS_PER_STATEMENT):
        part = ids[start : start + MAX_IDS_PER_STATEMENT]
        for doc_id, run_id, path, extraction_id in session.execute(
            select(Document.id, Document.run_id, Document.path, Extraction.id)
            .outerjoin(Extraction, Extraction.document_id == Document.id)
            .where(Document.id.in_(part))
        ):
            found[doc_id] = Target(run_id, path, extraction_id is not None)
        for doc_id, position in session.execute(
            select(RiskFactor.document_id, RiskFactor.position).where(RiskFactor.document_id.in_(part))
        ):
            found[doc_id].risk_positions.add(position)
    return found


@dataclass(frozen=True)
class NewCorrection:
    run_id: str
    document_id: int
    field: str
    position: int | None
    value: str | None
    original: str | None
    reviewer: str
    reviewed_at: datetime
    source: str | None


def store(session: Session, corrections: Sequence[NewCorrection]) -> tuple[int, int]:
    """Insert the corrections that change what the field's newest correction says (its value or
    its reviewer): a file imported twice stores nothing twice, and one imported again after
    another review of the field wins again. Returns (stored, already said)."""
    fresh = [c for c in corrections if not _newest_says_so(session, c)]
    if fresh:
        now = clock.now(session)
        session.execute(
            insert(table_of(Correction)),
            [
                {
                    "run_id": c.run_id,
                    "document_id": c.document_id,
                    "field": c.field,
                    "position": c.position,
                    "value": c.value,
                    "original": c.original,
                    "reviewer": c.reviewer,
                    "reviewed_at": c.reviewed_at.astimezone(UTC),
                    "source": c.source,
                    "created_at": now,
                }
                for c in fresh
            ],
        )
    return len(fresh), len(corrections) - len(fresh)


def _newest_says_so(session: Session, c: NewCorrection) -> bool:
    """Whether the newest correction of `c`'s field (as the views order them) has its value
    and reviewer."""
    newest = session.execute(
        select(Correction.value, Correction.reviewer)
        .where(
            Correction.document_id == c.document_id,
            Correction.field == c.field,
            Correction.position.is_not_distinct_from(c.position),
        )
        .order_by(Correction.reviewed_at.desc(), Correction.id.desc())
        .limit(1)
    ).first()
    return newest is not None and (newest.value, newest.reviewer) == (c.value, c.reviewer)


def reviewed_scalars(session: Session, run_id: str) -> list[tuple[int, str, str, str | None]]:
    """(document_id, path, field, value) of the newest correction of each scalar field of the
    run's documents, by document id and field (value None: the field has no value)."""
    newest = (
        select(
            Correction.document_id,
            Correction.field,
            Correction.value,
            func.row_number()
            .over(
                partition_by=(Correction.document_id, Correction.field),
                order_by=(Correction.reviewed_at.desc(), Correction.id.desc()),
            )
            .label("rank"),
        )
        .where(Correction.run_id == run_id, Correction.field.in_(SCALAR_FIELDS))
        .subquery()
    )
    rows = session.execute(
        select(newest.c.document_id, Document.path, newest.c.field, newest.c.value)
        .join(Document, Document.id == newest.c.document_id)
        .where(newest.c.rank == 1)
        .order_by(newest.c.document_id, newest.c.field)
    ).all()
    return [(r[0], r[1], r[2], r[3]) for r in rows]
