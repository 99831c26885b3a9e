"""What the filing says of itself against what the model answered (pure).

The SGML header of a submission and the inline-XBRL `dei:` cover facts name the registrant and
the fiscal year before any model reads the filing (`pipeline.ingest.filing.metadata`, stored as
`documents.company_name` and `documents.fiscal_year`). Where the filing has them, they are the
field's value, and the model's answer becomes a cross-check:

- the model agrees (names compared after `same_company`'s normalisation): confidence AGREES;
- the model said nothing: FILED_ONLY;
- the model said something else: DIFFERS, low enough for escalation's threshold and the review
  sheet, and the model's value is kept beside the filing's in `extractions.data`
  (`filing_metadata`), so an analyst sees both.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import replace
from typing import Any

from pipeline.extraction.confidence import Assessed, FieldScore
from pipeline.extraction.schemas import FilingExtraction
from pipeline.extraction.signals import same_figure

AGREES = 0.97
FILED_ONLY = 0.9
DIFFERS = 0.45
"""Under the default PIPELINE_ESCALATE_BELOW (0.5): the review sheet lists the field."""

_SUFFIXES = {
    "inc", "incorporated", "corp", "corporation", "co", "company", "companies", "ltd", "limited",
    "plc", "llc", "lp", "l p", "nv", "n v", "sa", "s a", "ag", "se", "the", "group", "holdings", "de",
}  # fmt: skip
_STATE = re.compile(r"/[a-z]{2,3}/?\s*$")


def company_key(name: str) -> str:
    """A company's name without what varies between its spellings: case, accents, punctuation,
    "The", "&"/"and", legal suffixes and EDGAR's "/DE/" state marks. "COCA COLA CO" and "The
    Coca-Cola Company" both give "coca cola"."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    folded = _STATE.sub("", folded.strip()).replace("&", " and ")
    words = re.sub(r"[^a-z0-9]+", " ", folded).split()
    while words and words[-1] in _SUFFIXES:
        words.pop()
    while words and words[0] == "the":
        words.pop(0)
    return " ".join(words)


def same_company(a: str, b: str) -> bool:
    key_a, key_b = company_key(a), company_key(b)
    return bool(key_a) and (key_a == key_b or key_a.replace(" ", "") == key_b.replace(" ", ""))


def check_revenue(assessed: Assessed, fact: tuple[float, str] | None) -> Assessed:
    """`assessed` with its revenue's confidence moved by the filing's own inline-XBRL fact
    (`fact`: value, concept): within REVENUE_TOLERANCE it moves half way to 1 (the agreement is
    the reason, in `checks`); outside it keeps 0.4 of its score, under the escalation threshold,
    so the field is escalated and listed for review with both values. The model's value stays:
    a filer may tag oddly. Checking a value already checked changes nothing."""
    value = assessed.grounded.extraction.revenue_usd
    if fact is None or value is None:
        return assessed
    earlier = assessed.checks.get("revenue_usd")
    if earlier is not None and earlier["model"] == value:
        return assessed
    filed_value, concept = fact
    agrees = same_figure(value, filed_value)
    current = assessed.fields["revenue_usd"]
    confidence = current.confidence + (1 - current.confidence) * 0.5 if agrees else current.confidence * 0.4
    check = {
        "filed": filed_value,
        "model": value,
        "verdict": "agrees" if agrees else "differs",
        "source": f"inline XBRL ({concept})",
        "relative_difference": round(abs(value - filed_value) / abs(filed_value), 6) if filed_value else None,
    }
    fields = {
        **assessed.fields,
        "revenue_usd": FieldScore(round(confidence, 3), current.match, current.chunk),
    }
    return replace(assessed, fields=fields, checks={**assessed.checks, "revenue_usd": check})


def cross_check(assessed: Assessed, company: str | None, fiscal_year: int | None, source: str) -> Assessed:
    """`assessed` with the filing's own company and fiscal year (where it states them) as the
    values, each scored by whether the model's answer agrees; `source` says where they were read."""
    extraction = assessed.grounded.extraction
    values = extraction.model_dump()
    fields = dict(assessed.fields)
    checks: dict[str, Any] = {}
    for name, filed, agree in (
        ("company", company, lambda model: same_company(model, company or "")),
        ("fiscal_year", fiscal_year, lambda model: model == fiscal_year),
    ):
        if filed is None:
            continue
        said = values[name]
        verdict = "agrees" if said is not None and agree(said) else ("silent" if said is None else "differs")
        confidence = {"agrees": AGREES, "silent": FILED_ONLY, "differs": DIFFERS}[verdict]
        current = fields[name]
        fields[name] = FieldScore(confidence, current.match or "none", current.chunk)
        values[name] = filed
        checks[name] = {"filed": filed, "model": said, "verdict": verdict, "source": source}
    if not checks:
        return assessed
    updated = FilingExtraction.model_validate(values)
    grounded = replace(assessed.grounded, extraction=updated)
    return replace(assessed, grounded=grounded, fields=fields, checks={**assessed.checks, **checks})
