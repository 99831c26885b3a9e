"""A run's extractions and risk factors as they are read back: by the report (one row per
document), by a finalize that summarizes an extraction, and by `pipeline evaluate`.

Columns, not entities, where a run's documents are read: a 10,000-document run must not load
every extraction's JSON."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

from sqlalchemy import Row, Select, or_, select
from sqlalchemy.orm import Session

from pipeline.storage.models import Document, Extraction, RiskFactor, Run, XbrlFact


def _report_query(run_id: str) -> Select[Any]:
    """The run's documents, each with its extraction's columns (None for a document without
    one): id, path, status, error, document_id (the extraction's), company, fiscal_year,
    revenue_usd, revenue_grounded, quotes_total, quotes_grounded, injection_excerpt, and the three
    fields' confidences."""
    return (
        select(
            Document.id,
            Document.path,
            Document.status,
            Document.error,
            Extraction.document_id,
            Extraction.company,
            Extraction.fiscal_year,
            Extraction.revenue_usd,
            Extraction.revenue_grounded,
            Extraction.quotes_total,
            Extraction.quotes_grounded,
            Document.injection_excerpt,
            Extraction.company_confidence,
            Extraction.fiscal_year_confidence,
            Extraction.revenue_confidence,
        )
        # Joined on the run as well (an extraction is its document's run's): the run's
        # extractions come through their run's index, not a scan of every run's.
        .outerjoin(Extraction, (Extraction.document_id == Document.id) & (Extraction.run_id == run_id))
        .where(Document.run_id == run_id)
    )


def report_rows(session: Session, run_id: str, page_rows: int) -> Iterator[Sequence[Row[Any]]]:
    """Every document of the run by path (`_report_query`'s columns), `page_rows` rows at a
    time, streamed from one query (a server-side cursor on Postgres), never all at once."""
    query = _report_query(run_id).order_by(Document.path, Document.id).execution_options(yield_per=page_rows)
    yield from session.execute(query).partitions()


def attention_rows(session: Session, run_id: str, limit: int) -> list[Row[Any]]:
    """The run's documents that need a look, by path (`_report_query`'s columns): up to `limit`
    of those not extracted (failed, skipped), and up to `limit` of the extracted ones with an
    injection warning. Two bounded reads through the run's status index, however large the run."""
    order = (Document.path, Document.id)
    failed = _report_query(run_id).where(Document.status != "extracted").order_by(*order).limit(limit)
    flagged = (
        _report_query(run_id)
        .where(Document.status == "extracted", Document.injection_excerpt.is_not(None))
        .order_by(*order)
        .limit(limit)
    )
    found = [*session.execute(failed).all(), *session.execute(flagged).all()]
    return sorted(found, key=lambda r: (r.path, r.id))


def summary_page(
    session: Session, run_id: str, covered: Collection[int], after: int, limit: int
) -> Sequence[Row[Any]]:
    """Up to `limit` of the run's extractions that no partial synthesis in `covered` holds, by
    id after `after` (0: from the first): id, document_id, summary, company, fiscal_year,
    revenue_usd, revenue_grounded. A page per transaction: the synthesis reads the next page
    only when it has a thread for it, and holds no connection while its calls are answered."""
    query = select(
        Extraction.id,
        Extraction.document_id,
        Extraction.summary,
        Extraction.company,
        Extraction.fiscal_year,
        Extraction.revenue_usd,
        Extraction.revenue_grounded,
    ).where(Extraction.run_id == run_id, Extraction.id > after)
    if covered:
        query = query.where(or_(Extraction.partial_id.is_(None), Extraction.partial_id.not_in(covered)))
    return session.execute(query.order_by(Extraction.id).limit(limit)).all()


def risks_of(session: Session, run_id: str, document_ids: Sequence[int]) -> Sequence[Row[Any]]:
    """(document_id, title, grounded) of these documents' risk factors, by document and position."""
    if not document_ids:
        return []
    return session.execute(
        select(RiskFactor.document_id, RiskFactor.title, RiskFactor.grounded)
        .where(RiskFactor.run_id == run_id, RiskFactor.document_id.in_(document_ids))
        .order_by(RiskFactor.document_id, RiskFactor.position)
    ).all()


def risk_rows(session: Session, run_id: str, *, with_confidence: bool = False) -> Sequence[Row[Any]]:
    """(document_id, title, grounded) of the run's risk factors, by document and position (and
    each one's confidence, `with_confidence`)."""
    columns: list[Any] = [RiskFactor.document_id, RiskFactor.title, RiskFactor.grounded]
    if with_confidence:
        columns.append(RiskFactor.confidence)
    return session.execute(
        select(*columns)
        .where(RiskFactor.run_id == run_id)
        .order_by(RiskFactor.document_id, RiskFactor.position)
    ).all()


def extracted_rows(session: Session, run_id: str) -> Sequence[Row[Any]]:
    """id, path, company, fiscal_year, revenue_usd, revenue_grounded and the three fields'
    confidences of the run's documents that have an extraction, by id."""
    return session.execute(
        select(
            Document.id,
            Document.path,
            Extraction.company,
            Extraction.fiscal_year,
            Extraction.revenue_usd,
            Extraction.revenue_grounded,
            Extraction.company_confidence,
            Extraction.fiscal_year_confidence,
            Extraction.revenue_confidence,
        )
        .join(Extraction, Extraction.document_id == Document.id)
        .where(Document.run_id == run_id)
        .order_by(Document.id)
    ).all()


def to_summarize(
    session: Session, document_id: int
) -> Row[tuple[Extraction, str, float | None, str | None]] | None:
    """The document's extraction with its run's query, budget and schema; None when it has no
    extraction (or there is no such document)."""
    return session.execute(
        select(Extraction, Run.query, Run.budget_usd, Run.schema)
        .join(Run, Run.id == Extraction.run_id)
        .where(Extraction.document_id == document_id)
    ).one_or_none()


def grounded_risks(session: Session, document_id: int) -> Sequence[Row[tuple[str, str]]]:
    """(title, quote) of the document's risk factors whose quote was found, in order."""
    return session.execute(
        select(RiskFactor.title, RiskFactor.quote)
        .where(RiskFactor.document_id == document_id, RiskFactor.grounded)
        .order_by(RiskFactor.position)
    ).all()


def document_exists(session: Session, document_id: int) -> bool:
    """Whether this database holds the document (a finalize sent to another database than the
    producer's does not)."""
    return session.get(Document, document_id) is not None


def xbrl_truth_rows(session: Session, run_id: str) -> Sequence[Row[Any]]:
    """path, status, company_name, fiscal_year, the revenue fact's value and why there is none,
    of the run's documents that were read (not skipped), by id."""
    return session.execute(
        select(
            Document.path,
            Document.status,
            Document.company_name,
            Document.fiscal_year,
            XbrlFact.value,
            XbrlFact.why,
        )
        .outerjoin(
            XbrlFact,
            (XbrlFact.document_id == Document.id)
            & (XbrlFact.run_id == Document.run_id)
            & (XbrlFact.field == "revenue_usd"),
        )
        .where(Document.run_id == run_id, Document.status != "skipped")
        .order_by(Document.id)
    ).all()
