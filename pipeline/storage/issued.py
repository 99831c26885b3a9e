"""Whether this database handed out a document id: what tells a document it deleted (`pipeline
prune --all`, a run deleted) from one it never had (a worker on another database than the
producer's). A message names a document by id only; ids are issued in order and never again."""

from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from pipeline.storage.models import Document


def document_id_issued(session: Session, document_id: int) -> bool:
    """This database issued `document_id` (its documents' sequence has reached it, on Postgres;
    elsewhere, a later document is still there)."""
    if session.get_bind().dialect.name == "postgresql":
        sequence = session.scalar(text("SELECT pg_get_serial_sequence('documents', 'id')"))
        if sequence:
            last, called = session.execute(text(f"SELECT last_value, is_called FROM {sequence}")).one()
            return bool(called) and int(last) >= document_id
    highest = session.scalar(select(func.max(Document.id)))
    return highest is not None and int(highest) >= document_id


def deleted(session: Session, document_id: int) -> bool:
    """This database issued `document_id` and no longer holds it."""
    return session.get(Document, document_id) is None and document_id_issued(session, document_id)
