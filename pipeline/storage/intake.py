"""Submit: the run's row, each file's content (stored once) and its document and chunk rows."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields
from datetime import date
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, insert, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from pipeline.storage import clock
from pipeline.storage.models import (
    TERMINAL_DOC_STATUSES,
    Chunk,
    Content,
    DocStatus,
    Document,
    Run,
    RunStatus,
    XbrlFact,
    table_of,
)

if TYPE_CHECKING:
    from pipeline.ingest.chunking import ChunkSpan


def create_run(
    session: Session,
    run_id: str,
    *,
    name: str | None,
    query: str,
    model: str,
    prompt_version: str,
    simulated: bool,
    reuse_answers: bool = True,
    budget_usd: float | None = None,
    schema: str | None = None,
) -> Run:
    run = Run(
        id=run_id,
        name=name,
        query=query,
        model=model,
        prompt_version=prompt_version,
        simulated=simulated,
        reuse_answers=reuse_answers,
        budget_usd=budget_usd,
        schema=schema,
        status=RunStatus.PENDING,
        created_at=clock.now(session),
    )
    session.add(run)
    session.flush()
    return run


def delete_run(session: Session, run_id: str) -> None:
    session.execute(delete(Document).where(Document.run_id == run_id))
    session.execute(delete(Run).where(Run.id == run_id))


def extracted_contents(session: Session, sha256s: Collection[str]) -> set[str]:
    """Of these contents, those some run already extracted (one query for a batch of files)."""
    if not sha256s:
        return set()
    found = session.scalars(
        select(Document.sha256)
        .where(Document.sha256.in_(sorted(sha256s)), Document.status == DocStatus.EXTRACTED)
        .distinct()
    )
    return {sha for sha in found if sha is not None}


@dataclass(frozen=True)
class Read:
    """What the intake found in a file, kept on its document row (the columns of the same names)."""

    source_format: str
    form_type: str | None = None
    company_name: str | None = None
    cik: str | None = None
    period_of_report: date | None = None
    fiscal_year: int | None = None
    accession_number: str | None = None
    filing_date: date | None = None
    intake: dict[str, Any] | None = None
    revenue: dict[str, Any] | None = None
    """The filing's own total-revenue fact: value, concept, context, period_start, period_end,
    why (an `xbrl_facts` row)."""

    def columns(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "revenue"}
        values["form_type"] = (self.form_type or "")[:20] or None
        values["company_name"] = (self.company_name or "")[:300] or None
        values["accession_number"] = (self.accession_number or "")[:25] or None
        return values


def store_content(
    session: Session, sha256: str, text: str, size_bytes: int, offsets: Sequence[tuple[int, int]] = ()
) -> None:
    """The text, stored once per content: kept when it is there, written again when `pipeline
    prune` dropped it (NULL) or it is empty (a downgrade of migration 0013 kept '' in place of a
    pruned text: no filing is stored empty). ON CONFLICT DO UPDATE locks the row until this
    transaction ends (even when its WHERE leaves it unchanged), so a concurrent prune skips a
    text a document being submitted uses, and one that pruned it first is undone here."""
    session.execute(
        _store_statement(session.get_bind().dialect.name), _content_row(sha256, text, size_bytes, offsets)
    )


def _content_row(
    sha256: str, text: str, size_bytes: int, offsets: Sequence[tuple[int, int]]
) -> dict[str, Any]:
    return {
        "sha256": sha256,
        "text": text,
        "bytes": size_bytes,
        "source_offsets": [list(pair) for pair in offsets] or None,
    }


@functools.lru_cache(maxsize=4)
def _store_statement(dialect: str) -> Any:
    """`store_content`'s upsert, built once per dialect with its values as parameters (built per
    call with literal values, it was compiled again for every filing: a third of submit's time)."""
    insert_into = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert_into(table_of(Content))
    return stmt.on_conflict_do_update(
        index_elements=["sha256"],
        set_={
            "text": stmt.excluded.text,
            "bytes": stmt.excluded.bytes,
            "source_offsets": stmt.excluded.source_offsets,
        },
        where=or_(table_of(Content).c.text.is_(None), table_of(Content).c.text == ""),
    )


@dataclass(frozen=True)
class NewDocument:
    """One file of a run as `add_documents` stores it: its document row, its content (when it is
    extracted) and its chunk rows."""

    path: str
    sha256: str | None
    size_bytes: int
    status: DocStatus = DocStatus.PENDING
    error: str | None = None
    note: str | None = None
    spans: Sequence[ChunkSpan] = ()
    injection_excerpt: str | None = None
    trace_parent: str | None = None
    read: Read | None = None
    text: str | None = None
    """Stored once per content (`store_content`) before the document; None for a skipped file."""
    offsets: Sequence[tuple[int, int]] = ()


_READ_COLUMNS = Read(source_format="").columns().keys()


def add_documents(session: Session, run_id: str, documents: Sequence[NewDocument]) -> list[int]:
    """Store the documents, their contents and chunks, in a few statements for the whole list
    (each a multi-row insert): a night's tens of thousands of filings are stored a batch at a
    time, not a round trip per row. Their ids, in the order given."""
    if not documents:
        return []
    contents = {d.sha256: d for d in documents if d.text is not None and d.sha256 is not None}
    if contents:
        session.execute(
            _store_statement(session.get_bind().dialect.name),
            [_content_row(sha, d.text or "", d.size_bytes, d.offsets) for sha, d in contents.items()],
        )
    now = clock.now(session) if any(d.status in TERMINAL_DOC_STATUSES for d in documents) else None
    rows = [_document_row(run_id, d, now) for d in documents]
    ids: list[int] = list(
        session.scalars(
            insert(table_of(Document)).returning(table_of(Document).c.id, sort_by_parameter_order=True),
            rows,
        )
    )
    facts = [
        {"document_id": doc_id, "run_id": run_id, "field": "revenue_usd", **d.read.revenue}
        for doc_id, d in zip(ids, documents, strict=True)
        if d.read and d.read.revenue is not None and d.status != DocStatus.SKIPPED
    ]
    if facts:
        session.execute(insert(table_of(XbrlFact)), facts)
    chunks = [
        {
            "document_id": doc_id,
            "run_id": run_id,
            "idx": s.idx,
            "char_start": s.char_start,
            "char_end": s.char_end,
            "token_estimate": s.token_estimate,
            "section": s.section,
        }
        for doc_id, d in zip(ids, documents, strict=True)
        for s in d.spans
    ]
    if chunks:
        session.execute(insert(table_of(Chunk)), chunks)
    return ids


def _document_row(run_id: str, d: NewDocument, now: Any) -> dict[str, Any]:
    """The `documents` row of `d`, every column named (a multi-row insert takes rows of one shape)."""
    return {
        "run_id": run_id,
        "path": d.path,
        "sha256": d.sha256,
        "bytes": d.size_bytes,
        "status": d.status,
        "error": d.error,
        "note": d.note,
        "chunk_count": len(d.spans),
        "finished_at": now if d.status in TERMINAL_DOC_STATUSES else None,
        "injection_flag": d.injection_excerpt is not None,
        "injection_excerpt": d.injection_excerpt,
        "trace_parent": d.trace_parent,
        **(d.read.columns() if d.read else dict.fromkeys(_READ_COLUMNS)),
    }


def add_document(session: Session, run_id: str, path: str, **fields: Any) -> int:
    """Store one document (the fields of `NewDocument`) and its chunks; its id."""
    return add_documents(session, run_id, [NewDocument(path, **fields)])[0]
