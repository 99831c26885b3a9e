"""Which tier answered each document of a run (`documents.tier`, `tier_reason`), and the run's
plan it is judged against (`pipeline.runs.tiers`)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from pipeline.storage.models import DocStatus, Document, LLMCall, Run, aware, table_of

_DOCUMENTS = table_of(Document)


class RunPlan(NamedTuple):
    mode: str
    extract_tier: str | None
    standard_from: datetime | None
    reason: str | None
    """The planner's last reason (`runs.tier_reason`), else the mode's."""


def run_plan(session: Session, run_id: str) -> RunPlan | None:
    found = session.execute(
        select(Run.mode, Run.extract_tier, Run.standard_from, Run.tier_reason, Run.mode_reason).where(
            Run.id == run_id
        )
    ).first()
    if found is None:
        return None
    standard_from = aware(found.standard_from) if found.standard_from else None
    return RunPlan(found.mode, found.extract_tier, standard_from, found.tier_reason or found.mode_reason)


def extracted_modes(session: Session, run_id: str) -> dict[int, set[str]]:
    """Each extracted document of the run: the modes of its answered extract calls (empty: none
    made in this run, its answers were reused)."""
    modes: dict[int, set[str]] = {
        doc_id: set()
        for doc_id in session.scalars(
            select(Document.id).where(Document.run_id == run_id, Document.status == DocStatus.EXTRACTED)
        )
    }
    answered = (
        select(LLMCall.document_id, LLMCall.mode)
        .where(LLMCall.run_id == run_id, LLMCall.stage == "extract", LLMCall.status == "ok")
        .distinct()
    )
    for doc_id, mode in session.execute(answered):
        if doc_id in modes:
            modes[doc_id].add(mode)
    return modes


def set_document_tiers(session: Session, tiers: dict[int, tuple[str, str]]) -> None:
    """Store each document's (tier, reason)."""
    if tiers:
        session.execute(
            update(_DOCUMENTS)
            .where(_DOCUMENTS.c.id == bindparam("doc_id"))
            .values(tier=bindparam("tier"), tier_reason=bindparam("reason")),
            [{"doc_id": d, "tier": t, "reason": r} for d, (t, r) in tiers.items()],
        )


def tier_counts(session: Session, run_id: str) -> dict[str, dict[str, int]]:
    """The run's documents per tier, and per reason within each tier."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    rows = session.execute(
        select(Document.tier, Document.tier_reason, func.count())
        .where(Document.run_id == run_id, Document.tier.is_not(None))
        .group_by(Document.tier, Document.tier_reason)
    )
    for tier, reason, count in rows:
        counts[tier][reason or ""] = count
    return dict(counts)
