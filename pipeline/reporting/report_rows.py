"""A run's documents as the report reads them: page by page, never all at once.

Finalize's memory stays flat whatever the run's size: the summaries go to the synthesis as they
are read, and the report keeps what a reader can take in (the filings table of a run of up to
LISTED_ROWS documents; of a larger run, only the documents that need a look, at most LISTED_ROWS
of each kind, read as such). The table of every document is written from the pages, row by row,
as CSV (`pipeline report RUN --format csv`, and `<run id>-documents.csv` next to `pipeline run`'s
report).
"""

from __future__ import annotations

import csv
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from pipeline.reporting.compress import fallback_summary
from pipeline.reporting.render import DocumentRow
from pipeline.reporting.review_sheet import FORMULA_STARTS
from pipeline.storage import extractions
from pipeline.storage.db import session_scope

if TYPE_CHECKING:
    from sqlalchemy import Engine, Row

PAGE_ROWS = 500
"""Documents read per query: about half a MB of rows and summaries held at a time."""
LISTED_ROWS = 200
"""A run of up to this many documents has its filings table in the report; a larger one has it
in its documents table (CSV), and the report lists at most this many of its failed or skipped
documents and of its injection warnings."""

Line = tuple["Row[Any]", list[str], list[str]]
"""A document's row, its grounded risk-factor titles and its unverified ones."""


def pages(engine: Engine, run_id: str) -> Iterator[list[Line]]:
    """The run's documents by path, PAGE_ROWS at a time, from one query in one transaction (read
    while nothing else waits: the report's listing, the CSV)."""
    with session_scope(engine) as session:
        for rows in extractions.report_rows(session, run_id, PAGE_ROWS):
            ids = [r.id for r in rows if r.document_id is not None]
            titles, unverified = risk_titles(extractions.risks_of(session, run_id, ids))
            yield [(r, titles.get(r.id, []), unverified.get(r.id, [])) for r in rows]


def risk_titles(risks: Sequence[Row[Any]]) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """Risk-factor titles per document: those whose quote was found, and the unverified."""
    titles: dict[int, list[str]] = {}
    unverified: dict[int, list[str]] = {}
    for document_id, title, grounded in risks:
        (titles if grounded else unverified).setdefault(document_id, []).append(title)
    return titles, unverified


def summaries(
    engine: Engine, run_id: str, covered: Collection[int], page_rows: int | None = None
) -> Iterator[str]:
    """One summary per extracted document that no partial synthesis in `covered` holds: the
    stored one, or one built from its fields (its grounded titles named). Read a page at a
    time, each in a transaction of its own: the synthesis takes the next page while its calls
    are answered, and holds no connection meanwhile."""
    page_rows = page_rows or PAGE_ROWS
    after = 0
    while True:
        with session_scope(engine) as session:
            rows = extractions.summary_page(session, run_id, covered, after, page_rows)
            bare = [r.document_id for r in rows if not r.summary]
            titles, _ = risk_titles(extractions.risks_of(session, run_id, bare))
        for r in rows:
            revenue = r.revenue_usd if r.revenue_grounded is not False else None
            yield r.summary or fallback_summary(
                r.company, r.fiscal_year, revenue, titles.get(r.document_id, [])
            )
        if len(rows) < page_rows:
            return
        after = rows[-1].id


def document_row(line: Line) -> DocumentRow:
    r, titles, unverified = line
    return DocumentRow(
        path=r.path,
        status=r.status,
        error=r.error,
        company=r.company,
        fiscal_year=r.fiscal_year,
        revenue_usd=r.revenue_usd,
        revenue_grounded=r.revenue_grounded,
        risk_titles=titles,
        unverified_risk_titles=unverified,
        quotes_total=r.quotes_total or 0,
        quotes_grounded=r.quotes_grounded or 0,
        injection_excerpt=r.injection_excerpt,
        confidence=lowest(r.company_confidence, r.fiscal_year_confidence, r.revenue_confidence),
    )


def lowest(*confidences: float | None) -> float | None:
    scored = [c for c in confidences if c is not None]
    return min(scored) if scored else None


@dataclass
class Listing:
    """The documents a report lists: all of them (`complete`), or, past LISTED_ROWS, those that
    need a look (not extracted, flagged), at most LISTED_ROWS of each kind."""

    documents: list[DocumentRow] = field(default_factory=list)
    complete: bool = True


def listing(engine: Engine, run_id: str, total: int) -> Listing:
    """The report's documents for a run of `total`: every one, read in pages, up to LISTED_ROWS;
    past it, only those that need a look, read as such (the others are not read at all)."""
    if total <= LISTED_ROWS:
        return Listing([document_row(line) for page in pages(engine, run_id) for line in page])
    with session_scope(engine) as session:
        rows = extractions.attention_rows(session, run_id, LISTED_ROWS)
        ids = [r.id for r in rows if r.document_id is not None]
        titles, unverified = risk_titles(extractions.risks_of(session, run_id, ids))
    lines = [(r, titles.get(r.id, []), unverified.get(r.id, [])) for r in rows]
    return Listing([document_row(line) for line in lines], complete=False)


CSV_COLUMNS = [
    "path",
    "status",
    "error",
    "company",
    "fiscal_year",
    "revenue_usd",
    "revenue_grounded",
    "risk_factors",
    "unverified_risk_factors",
    "quotes_grounded",
    "quotes_total",
    "confidence",
    "injection_excerpt",
]


def write_csv(engine: Engine, run_id: str, out: TextIO) -> int:
    """Every document of the run as one CSV row (CSV_COLUMNS; risk factors joined by `; `),
    written as it is read; how many. A cell a spreadsheet would take for a formula (filing and
    model text) starts with an apostrophe."""
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    written = 0
    for page in pages(engine, run_id):
        for line in page:
            d = document_row(line)
            writer.writerow(
                [
                    _text(d.path),
                    d.status,
                    _text(d.error),
                    _text(d.company),
                    _number(d.fiscal_year),
                    _number(d.revenue_usd),
                    _number(d.revenue_grounded),
                    _text("; ".join(d.risk_titles)),
                    _text("; ".join(d.unverified_risk_titles)),
                    d.quotes_grounded,
                    d.quotes_total,
                    _number(d.confidence),
                    _text(d.injection_excerpt),
                ]
            )
            written += 1
    return written


def _text(value: str | None) -> str:
    """Filing or model text: a leading formula character gets an apostrophe."""
    text = value or ""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def _number(value: object) -> str:
    return "" if value is None else str(value)


def csv_name(run_id: str) -> str:
    """The documents table's file name, next to the run's report files."""
    return f"{run_id}-documents.csv"
