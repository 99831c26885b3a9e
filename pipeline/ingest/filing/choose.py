"""Which documents of a submission carry the filing's content, and why each other one does not
(pure). The parse (`sgml`) is apart from this choice.

The primary document is the one whose `<TYPE>` is the submission's form (a 10-K's `10-K`); the
exhibits taken are those whose type matches one of the patterns of PIPELINE_EXHIBIT_TYPES
(`EX-13*`: the annual report where some 10-Ks keep their financial statements; `EX-99*`: an 8-K's
press release). Every other part is left out, with its reason.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from pipeline.ingest.filing.sgml import Part

UUENCODED = "a uuencoded file (image, ZIP, spreadsheet): binary, nothing to read"
PDF_COPY = "a PDF copy"
XBRL_DATA = "XML data (XBRL instance, schema, linkbases; other XML)"
RENDERED = "EDGAR's rendering of the XBRL (R pages, FilingSummary, MetaLinks)"
SCRIPT_OR_STYLE = "JavaScript or CSS"
EXHIBIT_NOT_TAKEN = "an exhibit of a type not in PIPELINE_EXHIBIT_TYPES"
NOT_PRIMARY = "another document of the submission (not its form's)"
EMPTY = "no text in it"

_RENDERED_NAME = re.compile(r"^(r\d+\.htm|filingsummary\.xml|metalinks\.json|financial_report\.xlsx)$", re.I)


@dataclass(frozen=True)
class Choice:
    primary: Part | None
    exhibits: list[Part]
    left_out: list[tuple[Part, str]]


def choose(parts: list[Part], form: str | None, exhibit_types: list[str]) -> Choice:
    """The primary document, the exhibits to read with it, and each other part with its reason."""
    primary = _primary(parts, form)
    exhibits: list[Part] = []
    left_out: list[tuple[Part, str]] = []
    for part in parts:
        if part is primary:
            continue
        reason = _unreadable(part)
        if reason is None and not part.type.upper().startswith("EX-"):
            reason = NOT_PRIMARY
        if reason is None and not _matches(part.type, exhibit_types):
            reason = EXHIBIT_NOT_TAKEN
        if reason is None:
            exhibits.append(part)
        else:
            left_out.append((part, reason))
    return Choice(primary, exhibits, left_out)


def _primary(parts: list[Part], form: str | None) -> Part | None:
    wanted = (form or "").strip().upper()
    for part in parts:
        if wanted and part.type.strip().upper() == wanted and _unreadable(part) in (None, XBRL_DATA):
            return part  # the form's own document, in XML for some forms (4, 13F-HR, D, N-CEN)
    if not wanted:  # no header: the first readable document, as EDGAR lists the primary first
        return next((part for part in parts if _unreadable(part) is None), None)
    return None


def _unreadable(part: Part) -> str | None:
    """Why a part holds nothing to send, whatever its type; None when it may."""
    name = part.filename.lower()
    kind = part.type.upper()
    if part.uuencoded or kind in ("GRAPHIC", "ZIP", "EXCEL"):
        return UUENCODED
    if part.wrapper == "PDF" or kind == "PDF" or name.endswith(".pdf"):
        return PDF_COPY
    if _RENDERED_NAME.match(name) or kind == "JSON" or part.wrapper == "JSON":
        return RENDERED
    if kind.startswith("EX-101") or name.endswith((".xsd", ".xml")) or part.wrapper == "XML":
        return XBRL_DATA
    if name.endswith((".js", ".css")):
        return SCRIPT_OR_STYLE
    if part.size == 0:
        return EMPTY
    return None


def _matches(kind: str, patterns: list[str]) -> bool:
    upper = kind.strip().upper()
    return any(fnmatch.fnmatchcase(upper, pattern.strip().upper()) for pattern in patterns if pattern.strip())
