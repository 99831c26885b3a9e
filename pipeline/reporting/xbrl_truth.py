"""A truth file with no hand labels: each filing's own metadata and inline-XBRL facts
(`pipeline eval RUN --truth-from-xbrl`).

The company and fiscal year are the filing's cover facts (or SGML header), the revenue its
total-revenue fact chosen by context (`pipeline.ingest.filing.xbrl`). A filing with none of them
cannot be scored and is named with its reason; one with some is scored on those (a null field is
not scored). The company is the model's cross-check target already (`extraction.filed`), so its
score says little; the revenue is the witness that counts.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING

from pipeline.reporting.evaluate import TruthFiling
from pipeline.storage import extractions
from pipeline.storage.db import session_scope

if TYPE_CHECKING:
    from sqlalchemy import Engine


def truth_from_xbrl(engine: Engine, run_id: str) -> tuple[list[TruthFiling], list[tuple[str, str]]]:
    """The run's filings as truth from their own facts, and (file name, reason) of each filing
    whose revenue cannot be scored that way."""
    truths: list[TruthFiling] = []
    unscorable: list[tuple[str, str]] = []
    with session_scope(engine) as session:
        rows = extractions.xbrl_truth_rows(session, run_id)
    for path, status, company, fiscal_year, revenue, why in rows:
        name = PurePath(path).name
        if status != "extracted":
            unscorable.append((name, f"not extracted ({status})"))
        elif revenue is None:
            unscorable.append((name, why or "no inline-XBRL fact was read (stored before facts were)"))
        if company is None and fiscal_year is None and revenue is None:
            continue
        truths.append(TruthFiling(name, company, fiscal_year, revenue, None))
    return truths, unscorable
