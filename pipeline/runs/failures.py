"""Why a run's documents did not end extracted, grouped: `pipeline status` and `submit --wait`
show one line per reason with its count, not one per document.

A document's `error` is one sentence made where it failed ("answer did not validate after
repair: company: Field required; …", "gave up after 4 attempts: UpstreamUnavailable: 503 …").
Its reason is the part before the detail: the first clause, and for a retried failure the
error class that wore the retries out. Documents that failed the same way share it; the
detail differs between documents (a field name, a status code) and is kept as an example.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.storage import document_status
from pipeline.storage.db import session_scope
from pipeline.storage.models import DocStatus

if TYPE_CHECKING:
    from sqlalchemy import Engine

UNFINISHED_WHY = (DocStatus.FAILED, DocStatus.SKIPPED, "cancelled")
"""The final statuses other than extracted: each has a reason worth counting (`cancelled`:
what `pipeline cancel` leaves unfinished)."""
EXAMPLE_CHARS = 200
EXAMPLE_PATHS = 3
_GAVE_UP = re.compile(r"^gave up after \d+ attempts: ")
_CLASS = re.compile(r"^([A-Z][A-Za-z]+(?:Error|Exception|Unavailable|Limited|Timeout|Rejected|Answer)?): ")
NO_REASON = "no reason recorded"


@dataclass
class FailureGroup:
    status: str
    """failed, skipped or cancelled."""
    reason: str
    documents: int = 0
    example: str = ""
    """One document's whole error, shortened to EXAMPLE_CHARS."""
    paths: list[str] = field(default_factory=list)
    """The first EXAMPLE_PATHS documents' paths."""


def reason_of(error: str | None) -> str:
    """The class of a document's error: its first clause ("answer did not validate after
    repair"), for a retried failure "gave up after retries: " and the error class."""
    text = " ".join((error or "").split())
    if not text:
        return NO_REASON
    gave_up = _GAVE_UP.match(text)
    if gave_up:
        rest = text[gave_up.end() :]
        named = _CLASS.match(rest)
        return f"gave up after retries: {named.group(1) if named else _first_clause(rest)}"
    named = _CLASS.match(text)
    if named:
        return named.group(1)
    return _first_clause(text)


def _first_clause(text: str) -> str:
    head = text.split(": ", 1)[0]
    return head if len(head) <= EXAMPLE_CHARS else head[: EXAMPLE_CHARS - 1] + "…"


def group_failures(rows: list[tuple[str, str, str | None]]) -> list[FailureGroup]:
    """(status, path, error) rows as groups of one status and reason, the largest first."""
    groups: dict[tuple[str, str], FailureGroup] = {}
    for status, path, error in sorted(rows, key=lambda row: row[1]):
        reason = reason_of(error)
        group = groups.setdefault((status, reason), FailureGroup(status, reason))
        group.documents += 1
        if not group.example and error:
            text = " ".join(error.split())
            group.example = text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 1] + "…"
        if len(group.paths) < EXAMPLE_PATHS:
            group.paths.append(path)
    return sorted(groups.values(), key=lambda g: (-g.documents, g.status, g.reason))


def run_failures(engine: Engine, run_id: str) -> list[FailureGroup]:
    """The run's failed, skipped and cancelled documents, grouped by status and reason."""
    with session_scope(engine) as session:
        rows = document_status.errors_with_status(session, run_id, UNFINISHED_WHY)
    return group_failures(rows)
