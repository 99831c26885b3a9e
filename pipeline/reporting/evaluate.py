"""Scoring a run's extractions against a truth file (`examples/truth.json` format).

Filings are matched by file name. Per filing: company (exact, and normalised: case,
punctuation and legal suffixes ignored), fiscal year (exact), revenue (within a relative
tolerance) and risk factors (recall and precision of titles, matched one to one when their
normalised forms are equal or difflib's ratio reaches the threshold). Truth filings the run
does not hold score zero; run documents the truth does not name are listed, not scored.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from difflib import SequenceMatcher
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from pipeline.storage import extractions
from pipeline.storage.db import session_scope

if TYPE_CHECKING:
    from sqlalchemy import Engine

DEFAULT_REVENUE_TOLERANCE = 0.01
DEFAULT_TITLE_THRESHOLD = 0.85
"""difflib ratio at which two risk titles count as the same ("Labor availability" vs
"Labour availability" is 0.97; the closest two distinct titles of `examples/truth.json`,
"Customer concentration" and "Supply chain concentration", are 0.63)."""
_LEGAL_SUFFIXES = re.compile(
    r"\b(inc|incorporated|corp|corporation|co|company|ltd|limited|llc|plc|lp|holdings|group|sa|ag|nv)\b"
)


@dataclass(frozen=True)
class TruthFiling:
    filename: str
    company: str
    fiscal_year: int
    revenue_usd: float
    risk_factor_titles: list[str]


@dataclass
class ExtractedFiling:
    filename: str
    company: str | None = None
    fiscal_year: int | None = None
    revenue_usd: float | None = None
    revenue_grounded: bool | None = None
    risks: list[tuple[str, bool]] = field(default_factory=list)
    """(title, grounded) of every stored risk factor."""


@dataclass
class FilingScore:
    filename: str
    found: bool
    company_exact: bool = False
    company_normalised: bool = False
    fiscal_year: bool = False
    revenue: bool = False
    risks_truth: int = 0
    risks_extracted: int = 0
    risks_matched: int = 0

    @property
    def risk_recall(self) -> float | None:
        return self.risks_matched / self.risks_truth if self.risks_truth else None

    @property
    def risk_precision(self) -> float | None:
        return self.risks_matched / self.risks_extracted if self.risks_extracted else None

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "risk_recall": _round(self.risk_recall),
            "risk_precision": _round(self.risk_precision),
        }


@dataclass
class Evaluation:
    filings: list[FilingScore]
    unscored: list[str]
    """Run documents the truth file does not name."""
    revenue_tolerance: float
    title_threshold: float
    grounded_only: bool

    def overall(self) -> dict[str, Any]:
        n = len(self.filings)
        truth = sum(f.risks_truth for f in self.filings)
        extracted = sum(f.risks_extracted for f in self.filings)
        matched = sum(f.risks_matched for f in self.filings)

        def share(attr: str) -> float | None:
            return _round(sum(bool(getattr(f, attr)) for f in self.filings) / n) if n else None

        return {
            "filings": n,
            "found": sum(f.found for f in self.filings),
            "company_exact": share("company_exact"),
            "company_normalised": share("company_normalised"),
            "fiscal_year": share("fiscal_year"),
            "revenue": share("revenue"),
            "risk_recall": _round(matched / truth) if truth else None,
            "risk_precision": _round(matched / extracted) if extracted else None,
            "risks_truth": truth,
            "risks_extracted": extracted,
            "risks_matched": matched,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall(),
            "filings": [f.as_dict() for f in self.filings],
            "unscored": self.unscored,
            "revenue_tolerance": self.revenue_tolerance,
            "title_threshold": self.title_threshold,
            "grounded_only": self.grounded_only,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def load_truth(path: Path) -> list[TruthFiling]:
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data["filings"] if isinstance(data, dict) else data
    return [
        TruthFiling(
            filename=row["filename"],
            company=row["company"],
            fiscal_year=int(row["fiscal_year"]),
            revenue_usd=float(row["revenue_usd"]),
            risk_factor_titles=list(row.get("risk_factor_titles", [])),
        )
        for row in rows
    ]


def normalise_company(name: str) -> str:
    words = re.sub(r"[^\w\s]", " ", name.lower())
    return " ".join(_LEGAL_SUFFIXES.sub(" ", words).split())


def normalise_title(title: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", title.lower()).split())


def titles_match(a: str, b: str, threshold: float) -> bool:
    x, y = normalise_title(a), normalise_title(b)
    return x == y or SequenceMatcher(None, x, y).ratio() >= threshold


def revenue_matches(found: float | None, truth: float, tolerance: float) -> bool:
    if found is None:
        return False
    return abs(found - truth) <= tolerance * abs(truth) if truth else found == 0


def score_filing(
    truth: TruthFiling,
    found: ExtractedFiling | None,
    *,
    revenue_tolerance: float = DEFAULT_REVENUE_TOLERANCE,
    title_threshold: float = DEFAULT_TITLE_THRESHOLD,
    grounded_only: bool = False,
) -> FilingScore:
    """One filing's scores; with `grounded_only`, facts whose quote was not found count as absent."""
    score = FilingScore(truth.filename, found is not None, risks_truth=len(truth.risk_factor_titles))
    if found is None:
        return score
    score.company_exact = found.company == truth.company
    score.company_normalised = found.company is not None and (
        normalise_company(found.company) == normalise_company(truth.company)
    )
    score.fiscal_year = found.fiscal_year == truth.fiscal_year
    revenue_ok = not grounded_only or found.revenue_grounded is not False
    score.revenue = revenue_ok and revenue_matches(found.revenue_usd, truth.revenue_usd, revenue_tolerance)
    titles = [title for title, grounded in found.risks if grounded or not grounded_only]
    score.risks_extracted = len(titles)
    unmatched = list(titles)
    for wanted in truth.risk_factor_titles:
        hit = next((t for t in unmatched if titles_match(t, wanted, title_threshold)), None)
        if hit is not None:
            unmatched.remove(hit)
            score.risks_matched += 1
    return score


def evaluate(
    truths: list[TruthFiling],
    extracted: dict[str, ExtractedFiling],
    *,
    revenue_tolerance: float = DEFAULT_REVENUE_TOLERANCE,
    title_threshold: float = DEFAULT_TITLE_THRESHOLD,
    grounded_only: bool = False,
) -> Evaluation:
    named = {t.filename for t in truths}
    scores = [
        score_filing(
            t,
            extracted.get(t.filename),
            revenue_tolerance=revenue_tolerance,
            title_threshold=title_threshold,
            grounded_only=grounded_only,
        )
        for t in truths
    ]
    unscored = sorted(name for name in extracted if name not in named)
    return Evaluation(scores, unscored, revenue_tolerance, title_threshold, grounded_only)


def load_run(engine: Engine, run_id: str) -> dict[str, ExtractedFiling]:
    """The run's extracted documents by file name (the last one wins if two share a name)."""
    with session_scope(engine) as session:
        rows = extractions.extracted_rows(session, run_id)
        risks = extractions.risk_rows(session, run_id)
    by_document: dict[int, list[tuple[str, bool]]] = {}
    for document_id, title, grounded in risks:
        by_document.setdefault(document_id, []).append((title, bool(grounded)))
    return {
        PurePath(path).name: ExtractedFiling(
            PurePath(path).name, company, year, revenue, grounded, by_document.get(doc_id, [])
        )
        for doc_id, path, company, year, revenue, grounded in rows
    }
