"""Scoring a run's extractions against a truth file (`examples/truth.json` format).

Filings are matched by file name. Per filing: company (exact, and normalised: case,
punctuation and legal suffixes ignored), fiscal year (exact), revenue (within a relative
tolerance) and risk factors (recall and precision of titles, matched one to one when their
normalised forms are equal or difflib's ratio reaches the threshold). Truth filings the run
does not hold score zero; run documents the truth does not name are listed, not scored. A truth
field that is null (a truth file made from reviews: `pipeline review truth`) is unknown: that
field of that filing is not scored.

Each scored field with a confidence is also an observation of the calibration
(`pipeline.reporting.calibration`): its confidence, and whether it was right.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from difflib import SequenceMatcher
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from pipeline.extraction.filed import company_key
from pipeline.reporting.calibration import Calibration, Observation
from pipeline.storage import extractions
from pipeline.storage.db import session_scope

if TYPE_CHECKING:
    from sqlalchemy import Engine

DEFAULT_REVENUE_TOLERANCE = 0.01
DEFAULT_TITLE_THRESHOLD = 0.85
"""difflib ratio at which two risk titles count as the same ("Labor availability" vs
"Labour availability" is 0.97; the closest two distinct titles of `examples/truth.json`,
"Customer concentration" and "Supply chain concentration", are 0.63)."""


@dataclass(frozen=True)
class TruthFiling:
    """A filing's true fields; None: not known (not scored)."""

    filename: str
    company: str | None
    fiscal_year: int | None
    revenue_usd: float | None
    risk_factor_titles: list[str] | None


@dataclass
class ExtractedFiling:
    filename: str
    company: str | None = None
    fiscal_year: int | None = None
    revenue_usd: float | None = None
    revenue_grounded: bool | None = None
    risks: list[tuple[str, bool]] = field(default_factory=list)
    """(title, grounded) of every stored risk factor."""
    confidence: dict[str, float | None] = field(default_factory=dict)
    """company, fiscal_year, revenue_usd: each field's stored confidence."""
    risk_confidence: list[float | None] = field(default_factory=list)
    """Each risk factor's confidence, in the order of `risks`."""


@dataclass
class FilingScore:
    """One filing's scores; None where the truth does not know the field."""

    filename: str
    found: bool
    company_exact: bool | None = False
    company_normalised: bool | None = False
    fiscal_year: bool | None = False
    revenue: bool | None = False
    risks_truth: int = 0
    risks_extracted: int = 0
    risks_matched: int = 0
    observations: list[Observation] = field(default_factory=list)

    @property
    def risk_recall(self) -> float | None:
        return self.risks_matched / self.risks_truth if self.risks_truth else None

    @property
    def risk_precision(self) -> float | None:
        return self.risks_matched / self.risks_extracted if self.risks_extracted else None

    def as_dict(self) -> dict[str, Any]:
        fields = asdict(self)
        del fields["observations"]
        return {
            **fields,
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
            known = [getattr(f, attr) for f in self.filings if getattr(f, attr) is not None]
            return _round(sum(bool(v) for v in known) / len(known)) if known else None

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

    def calibration(self) -> Calibration:
        """Accuracy per confidence band, over every scored field that has a confidence."""
        return Calibration([o for f in self.filings for o in f.observations])

    def as_dict(self) -> dict[str, Any]:
        return {
            "overall": self.overall(),
            "calibration": self.calibration().as_dict(),
            "filings": [f.as_dict() for f in self.filings],
            "unscored": self.unscored,
            "revenue_tolerance": self.revenue_tolerance,
            "title_threshold": self.title_threshold,
            "grounded_only": self.grounded_only,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


_TRUTH_FIELDS = ("company", "fiscal_year", "revenue_usd", "risk_factor_titles")


def load_truth(path: Path) -> list[TruthFiling]:
    """The truth file's filings. A field may be null (unknown, not scored), but a filing must name
    at least one, and no other key: a misspelt field would otherwise be silently unscored."""
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = data["filings"] if isinstance(data, dict) else data
    for row in rows:
        unknown = sorted(set(row) - {"filename", *_TRUTH_FIELDS})
        if unknown:
            raise ValueError(
                f"{row.get('filename')}: unknown fields {', '.join(unknown)} (known: {', '.join(_TRUTH_FIELDS)})"
            )
        if not any(name in row for name in _TRUTH_FIELDS):
            raise ValueError(
                f"{row.get('filename')}: no field to score (give any of {', '.join(_TRUTH_FIELDS)})"
            )
    return [
        TruthFiling(
            filename=row["filename"],
            company=row.get("company"),
            fiscal_year=None if row.get("fiscal_year") is None else int(row["fiscal_year"]),
            revenue_usd=None if row.get("revenue_usd") is None else float(row["revenue_usd"]),
            risk_factor_titles=None if "risk_factor_titles" not in row else list(row["risk_factor_titles"]),
        )
        for row in rows
    ]


def normalise_company(name: str) -> str:
    """Case, accents, punctuation, "The", "&", legal suffixes and EDGAR's "/DE/" marks aside
    (`COCA COLA CO` and `The Coca-Cola Company` are one name)."""
    return company_key(name)


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
    known = truth.risk_factor_titles
    score = FilingScore(truth.filename, found is not None, risks_truth=len(known or []))
    if found is None:
        score.company_exact = score.company_normalised = None if truth.company is None else False
        score.fiscal_year = None if truth.fiscal_year is None else False
        score.revenue = None if truth.revenue_usd is None else False
        return score
    if truth.company is not None:
        score.company_exact = found.company == truth.company
        score.company_normalised = found.company is not None and (
            normalise_company(found.company) == normalise_company(truth.company)
        )
    else:
        score.company_exact = score.company_normalised = None
    score.fiscal_year = None if truth.fiscal_year is None else found.fiscal_year == truth.fiscal_year
    revenue_ok = not grounded_only or found.revenue_grounded is not False
    score.revenue = (
        None
        if truth.revenue_usd is None
        else revenue_ok and revenue_matches(found.revenue_usd, truth.revenue_usd, revenue_tolerance)
    )
    for name, right in (
        ("company", score.company_normalised),
        ("fiscal_year", score.fiscal_year),
        ("revenue_usd", score.revenue),
    ):
        confidence = found.confidence.get(name)
        if right is not None and confidence is not None:
            score.observations.append(Observation(name, confidence, right))
    if known is not None:
        _score_risks(score, found, known, title_threshold, grounded_only)
    return score


def _score_risks(
    score: FilingScore, found: ExtractedFiling, known: list[str], threshold: float, grounded_only: bool
) -> None:
    """Risk recall and precision (titles matched one to one), and each risk's observation."""
    kept = [
        (title, found.risk_confidence[i] if i < len(found.risk_confidence) else None)
        for i, (title, grounded) in enumerate(found.risks)
        if grounded or not grounded_only
    ]
    score.risks_extracted = len(kept)
    wanted = list(known)
    for title, confidence in kept:
        hit = next((w for w in wanted if titles_match(title, w, threshold)), None)
        if hit is not None:
            wanted.remove(hit)
            score.risks_matched += 1
        if confidence is not None:
            score.observations.append(Observation("risk_factor", confidence, hit is not None))


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
        risks = extractions.risk_rows(session, run_id, with_confidence=True)
    by_document: dict[int, list[tuple[str, bool]]] = {}
    confidences: dict[int, list[float | None]] = {}
    for document_id, title, grounded, confidence in risks:
        by_document.setdefault(document_id, []).append((title, bool(grounded)))
        confidences.setdefault(document_id, []).append(confidence)
    return {
        PurePath(row.path).name: ExtractedFiling(
            PurePath(row.path).name,
            row.company,
            row.fiscal_year,
            row.revenue_usd,
            row.revenue_grounded,
            by_document.get(row.id, []),
            {
                "company": row.company_confidence,
                "fiscal_year": row.fiscal_year_confidence,
                "revenue_usd": row.revenue_confidence,
            },
            confidences.get(row.id, []),
        )
        for row in rows
    }
