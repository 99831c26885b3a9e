"""What a filing says of itself before a model reads it (pure): from the SGML header of a
submission and from the inline-XBRL `dei:` facts of its primary document.

Both header styles of EDGAR's dissemination files are read:

    ACCESSION NUMBER:  0000320193-23-000106         <ACCESSION-NUMBER>0000320193-23-000106
    CONFORMED SUBMISSION TYPE: 10-K                 <TYPE>10-K
    CONFORMED PERIOD OF REPORT: 20230930            <PERIOD>20230930
    FILED AS OF DATE: 20231103                      <FILING-DATE>20231103
    FILER: / COMPANY DATA:                          <FILER><COMPANY-DATA>
      COMPANY CONFORMED NAME: Apple Inc.              <CONFORMED-NAME>Apple Inc.
      CENTRAL INDEX KEY: 0000320193                   <CIK>0000320193

A filing about another company names it apart from its filer: a Form 3/4/5's company is its
ISSUER (the reporting owner is a person or a fund), a Schedule 13D/G's its SUBJECT COMPANY.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import date, datetime

SGML_HEADER = "SGML header"
INLINE_XBRL = "inline XBRL (dei)"

_ROLES = ("ISSUER", "SUBJECT COMPANY", "FILER", "FILED BY", "REPORTING-OWNER")
"""The header's company sections; which one is the filing's company depends on the form."""


@dataclass(frozen=True)
class Metadata:
    company: str | None = None
    cik: str | None = None
    form: str | None = None
    period: date | None = None
    """The period of report: a 10-K's fiscal year end, a 10-Q's quarter end, an 8-K's event."""
    fiscal_year: int | None = None
    accession: str | None = None
    filed: date | None = None
    source: dict[str, str] = field(default_factory=dict)
    """Where each field was read (SGML_HEADER or INLINE_XBRL)."""

    def merged(self, other: Metadata) -> Metadata:
        """These fields, with `other`'s wherever it has one (the inline XBRL speaks for the
        document itself; the header is EDGAR's index of the submission)."""
        changes: dict[str, object] = {}
        source = dict(self.source)
        for name in ("company", "cik", "form", "period", "fiscal_year", "accession", "filed"):
            value = getattr(other, name)
            if value is not None:
                changes[name] = value
                source[name] = other.source.get(name, "")
        return replace(self, **changes, source=source)  # type: ignore[arg-type]


def from_header(header: str) -> Metadata:
    """The submission's metadata from its header, in either style."""
    header = header.replace("\r\n", "\n").replace("\r", "\n")
    values = _tag_style(header) if "<ACCESSION-NUMBER>" in header.upper() else _colon_style(header)
    form = values.get("form")
    company, cik = _company(values, form or "")
    period = _date(values.get("period"))
    meta = Metadata(
        company=company,
        cik=_cik(cik),
        form=form,
        period=period,
        fiscal_year=period.year if period and form and _annual(form) else None,
        accession=values.get("accession"),
        filed=_date(values.get("filed")),
    )
    return replace(meta, source=dict.fromkeys(_present(meta), SGML_HEADER))


_TOP_KEYS = {
    "ACCESSION NUMBER": "accession",
    "CONFORMED SUBMISSION TYPE": "form",
    "CONFORMED PERIOD OF REPORT": "period",
    "FILED AS OF DATE": "filed",
    "ACCESSION-NUMBER": "accession",
    "TYPE": "form",
    "PERIOD": "period",
    "FILING-DATE": "filed",
}
_COLON_LINE = re.compile(r"^([ \t]*)([A-Z][A-Z0-9 \-/]*?):[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_TAG_LINE = re.compile(r"^[ \t]*<(/?)([A-Z][A-Z0-9\-]*)>[ \t]*(.*?)[ \t]*$", re.MULTILINE | re.IGNORECASE)


def _colon_style(header: str) -> dict[str, str]:
    values: dict[str, str] = {}
    role = None
    for match in _COLON_LINE.finditer(header):
        indent, key, value = match.group(1), match.group(2).strip(), match.group(3)
        if not indent and not value and key in _ROLES:
            role = key
            continue
        if not indent and key in _TOP_KEYS:
            values.setdefault(_TOP_KEYS[key], value)
        elif role and value and key in ("COMPANY CONFORMED NAME", "CENTRAL INDEX KEY"):
            values.setdefault(f"{role}:{key}", value)
    return values


def _tag_style(header: str) -> dict[str, str]:
    values: dict[str, str] = {}
    roles: list[str] = []
    for match in _TAG_LINE.finditer(header):
        closing, tag, value = match.group(1), match.group(2).upper(), match.group(3)
        role = tag.replace("SUBJECT-COMPANY", "SUBJECT COMPANY").replace("FILED-BY", "FILED BY")
        if role in _ROLES:
            if closing and roles and roles[-1] == role:
                roles.pop()
            elif not closing:
                roles.append(role)
            continue
        if closing or not value:
            continue
        if not roles and tag in _TOP_KEYS:
            values.setdefault(_TOP_KEYS[tag], value)
        elif roles and tag in ("CONFORMED-NAME", "CIK"):
            key = "COMPANY CONFORMED NAME" if tag == "CONFORMED-NAME" else "CENTRAL INDEX KEY"
            values.setdefault(f"{roles[-1]}:{key}", value)
    return values


def _company(values: dict[str, str], form: str) -> tuple[str | None, str | None]:
    """The filing's company: the issuer of an ownership report, the subject of a Schedule 13D/G,
    else the (first) filer."""
    order = ["ISSUER"]
    if form.upper().startswith(("SC ", "SCHEDULE 13")):
        order.append("SUBJECT COMPANY")
    order += ["FILER", "FILED BY", "SUBJECT COMPANY"]
    for role in order:
        name = values.get(f"{role}:COMPANY CONFORMED NAME")
        if name:
            return name, values.get(f"{role}:CENTRAL INDEX KEY")
    return None, None


def _annual(form: str) -> bool:
    return form.upper().split("/")[0] in ("10-K", "10-K405", "10-KT", "20-F", "40-F", "11-K", "N-CSR")


def _cik(value: str | None) -> str | None:
    digits = re.sub(r"\D", "", value or "")
    return digits.zfill(10) if digits else None


_DATE_FORMATS = ("%Y%m%d", "%Y-%m-%d", "%B %d, %Y", "%b %d, %Y", "%B %d %Y", "%d %B %Y", "%m/%d/%Y")


def _date(value: str | None) -> date | None:
    """A date as EDGAR's header (20231231) or a cover page (December 31, 2023) writes it."""
    if not value:
        return None
    cleaned = " ".join(value.replace("\u00a0", " ").replace(" ,", ",").split()).strip(" .")
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).date()
        except ValueError:
            continue
    return None


def _present(meta: Metadata) -> list[str]:
    names = ("company", "cik", "form", "period", "fiscal_year", "accession", "filed")
    return [name for name in names if getattr(meta, name) is not None]


DEI_FIELDS = {
    "dei:entityregistrantname": "company",
    "dei:entitycentralindexkey": "cik",
    "dei:documenttype": "form",
    "dei:documentperiodenddate": "period",
    "dei:documentfiscalyearfocus": "fiscal_year",
}
"""The inline-XBRL cover facts (Inline XBRL 1.1; EDGAR Filer Manual 6.5.20) this reads."""


def from_dei(facts: dict[str, str]) -> Metadata:
    """Metadata from the `dei:` facts of an inline-XBRL document (lower-case names, text as
    shown); a fact that does not parse is left out."""
    values: dict[str, object] = {}
    for concept, name in DEI_FIELDS.items():
        raw = " ".join((facts.get(concept) or "").split())
        if not raw:
            continue
        if name == "period":
            values[name] = _date(raw)
        elif name == "fiscal_year":
            values[name] = int(raw) if re.fullmatch(r"(19|20)\d\d", raw) else None
        elif name == "cik":
            values[name] = _cik(raw)
        else:
            values[name] = raw
    meta = Metadata(**{k: v for k, v in values.items() if v is not None})  # type: ignore[arg-type]
    return replace(meta, source=dict.fromkeys(_present(meta), INLINE_XBRL))
