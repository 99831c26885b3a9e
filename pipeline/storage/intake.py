"""Submit: the run's row, each file's content (stored once) and its document and chunk rows."""

from __future__ import annotations

import functools
from collections.abc import Sequence
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


def content_extracted(session: Session, sha256: str) -> bool:
    """Whether some run already extracted this exact content."""
    found = session.scalar(
        select(Document.id).where(Document.sha256 == sha256, Document.status == DocStatus.EXTRACTED).limit(1)
    )
    return found is not None


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
        _store_statement(session.get_bind().dialect.name),
        {
            "sha256": sha256,
            "text": text,
            "bytes": size_bytes,
            "source_offsets": [list(pair) for pair in offsets] or None,
        },
    )


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


def add_document(
    session: Session,
    run_id: str,
    path: str,
    *,
    sha256: str | None,
    size_bytes: int,
    status: DocStatus = DocStatus.PENDING,
    error: str | None = None,
    note: str | None = None,
    spans: Sequence[ChunkSpan] = (),
    injection_excerpt: str | None = None,
    trace_parent: str | None = None,
    read: Read | None = None,
) -> int:
    """Store the document and its chunks; its id. Core statements: a night's thousands of
    filings go through here one by one."""
    document_id: int = session.execute(
        insert(table_of(Document)).returning(table_of(Document).c.id),
        {
            "run_id": run_id,
            "path": path,
            "sha256": sha256,
            "bytes": size_bytes,
            "status": status,
            "error": error,
            "note": note,
            "chunk_count": len(spans),
            "finished_at": clock.now(session) if status in TERMINAL_DOC_STATUSES else None,
            "injection_flag": injection_excerpt is not None,
            "injection_excerpt": injection_excerpt,
            "trace_parent": trace_parent,
            **(read.columns() if read else {}),
        },
    ).scalar_one()
    if read and read.revenue is not None and status != DocStatus.SKIPPED:
        session.execute(
            insert(table_of(XbrlFact)),
            {"document_id": document_id, "run_id": run_id, "field": "revenue_usd", **read.revenue},
        )
    if spans:
        session.execute(
            insert(table_of(Chunk)),
            [
                {
                    "document_id": document_id,
                    "run_id": run_id,
                    "idx": s.idx,
                    "char_start": s.char_start,
                    "char_end": s.char_end,
                    "token_estimate": s.token_estimate,
                    "section": s.section,
                }
                for s in spans
            ],
        )
    return document_id
