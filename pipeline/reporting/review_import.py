"""Reading a review back (pure): the JSON the sheet saves or the CSV a spreadsheet filled in,
each value checked and written as the views read it, every key checked against the run's
documents before anything is stored; and the truth file `pipeline review truth` writes.

Every problem is a `ReviewFileError` whose message names the file, the row (or the saved
correction) and its key, and the reason: the import stores all of a file or none of it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path, PurePath
from typing import Any

from pipeline.reporting.review_sheet import shown, uncell
from pipeline.storage.corrections import RISK_FIELD, SCALAR_FIELDS, NewCorrection, Target

FIRST_YEAR, LAST_YEAR = 1950, 2100
COMPANY_MAX_CHARS = 300
"""As long as `extractions.company` may be."""
REVIEWER_MAX_CHARS = 200
NO_VALUE = "none"
"""What a CSV's `correction` says for "the field has no value" (the risk is not one)."""
_SCALES = {
    "thousand": 3,
    "k": 3,
    "million": 6,
    "mn": 6,
    "mm": 6,
    "m": 6,
    "billion": 9,
    "bn": 9,
    "b": 9,
    "trillion": 12,
    "tn": 12,
    "t": 12,
}
_AMOUNT = re.compile(
    r"^(?:usd|us\$|\$)?\s*(?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:e[+-]?\d+)?|\.\d+)"
    r"\s*(?P<scale>[a-z]+)?\.?\s*(?:usd|dollars)?$",
    re.IGNORECASE,
)


class ReviewFileError(ValueError):
    """A review file that cannot be imported; the message is the sentence to show."""


@dataclass(frozen=True)
class Entry:
    """One reviewed item of a review file."""

    where: str
    """"row 4" (CSV, as a spreadsheet numbers it) or "correction 3" (JSON)."""
    key: str
    document_id: int
    field: str
    position: int | None
    value: str | None
    """As stored: text the views cast (None: no value)."""
    original: str | None
    path: str | None
    reviewer: str | None

    @property
    def confirms(self) -> bool:
        """The reviewer kept the value the sheet showed."""
        try:
            return self.value == value_of(self.field, self.original)
        except ValueError:
            return False


@dataclass(frozen=True)
class ReviewFile:
    name: str
    run_id: str | None
    """The JSON's run (a CSV names none: its documents do)."""
    reviewer: str | None
    saved_at: datetime | None
    """When the JSON says it was saved: checked, not stored (the import's time is)."""
    entries: list[Entry]


def value_of(field: str, raw: object) -> str | None:
    """`raw` as a correction of `field` stores it, or ValueError saying why it cannot be one:
    a fiscal year is a whole number from 1950 to 2100, a revenue a non-negative amount
    ("1,234.5", "$1.2 billion", "3.4m"), a company or risk title text. Blank text is no value."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ValueError(f"{field} must be text or a number, not {json.dumps(raw)[:40]}")
    if isinstance(raw, str):
        raw = raw.strip()
        if not raw:
            return None
    if field == "fiscal_year":
        return str(_year(raw))
    if field == "revenue_usd":
        return shown(_amount(raw))
    name = str(raw)
    if field == "company" and len(name) > COMPANY_MAX_CHARS:
        raise ValueError(f"company is longer than {COMPANY_MAX_CHARS} characters")
    return name


def _year(raw: str | int | float) -> int:
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, str) and re.fullmatch(r"\d{4}", raw):
        raw = int(raw)
    if not isinstance(raw, int) or not FIRST_YEAR <= raw <= LAST_YEAR:
        raise ValueError(f"fiscal_year {str(raw)!r} is not a year from {FIRST_YEAR} to {LAST_YEAR}")
    return raw


def _amount(raw: str | int | float) -> float:
    if isinstance(raw, str):
        found = _AMOUNT.match(raw)
        scale = (found.group("scale") or "").lower() if found else ""
        if found is None or (scale and scale not in _SCALES):
            sign = " (it must not be negative)" if raw.startswith(("-", "(", "$-", "-$")) else ""
            raise ValueError(f"revenue_usd {raw!r} is not an amount such as 1,234.5 or $1.2 billion{sign}")
        try:
            number = Decimal(found.group("number").replace(",", "")).scaleb(_SCALES.get(scale, 0))
        except InvalidOperation as exc:
            raise ValueError(f"revenue_usd {raw!r} is not an amount") from exc
        raw = float(number)
    if not math.isfinite(raw) or raw < 0:
        raise ValueError(f"revenue_usd {raw!r} must be a non-negative amount")
    return float(raw)


def parse_key(key: str) -> tuple[int, str, int | None]:
    """(document_id, field, position) of `<document_id>:<field>` or `<document_id>:risk_title:<n>`."""
    parts = key.strip().split(":")
    if len(parts) == 2 and parts[0].isdigit() and parts[1] in SCALAR_FIELDS:
        return int(parts[0]), parts[1], None
    if len(parts) == 3 and parts[0].isdigit() and parts[1] == RISK_FIELD and parts[2].isdigit():
        return int(parts[0]), RISK_FIELD, int(parts[2])
    raise ValueError(
        f"key {key!r} is not <document>:<field> (company, fiscal_year, revenue_usd) "
        "or <document>:risk_title:<position>"
    )


def read_review(path: Path) -> ReviewFile:
    """The review in `path`: the sheet's JSON (a .json file, or one starting with "{") or the CSV."""
    try:
        content = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ReviewFileError(
            f"{path.name}: not UTF-8 text; save it as CSV UTF-8 or as the sheet's JSON"
        ) from exc
    if path.suffix.lower() == ".json" or content.lstrip().startswith("{"):
        return _from_json(path.name, content)
    return _from_csv(path.name, content)


def _from_json(name: str, content: str) -> ReviewFile:
    try:
        data = json.loads(content)
    except json.JSONDecodeError as exc:
        raise ReviewFileError(f"{name}: not valid JSON ({exc.msg}, line {exc.lineno})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("corrections"), list):
        raise ReviewFileError(f'{name}: not a review sheet\'s file (no "corrections" list)')
    run_id = data.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise ReviewFileError(f'{name}: no "run_id": save the corrections again from the review sheet')
    reviewer = data.get("reviewer")
    saved_at = _saved_at(name, data.get("saved_at"))
    entries = []
    for n, item in enumerate(data["corrections"], 1):
        where = f"correction {n}"
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise ReviewFileError(f'{name}: {where} has no "key"')
        entries.append(_entry(name, where, item, item.get("value")))
    reviewer = (reviewer.strip() or None) if isinstance(reviewer, str) else None
    return ReviewFile(name, run_id, reviewer, saved_at, entries)


def _saved_at(name: str, raw: object) -> datetime | None:
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(str(raw))
    except ValueError as exc:
        raise ReviewFileError(f"{name}: saved_at {raw!r} is not an ISO 8601 time") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _from_csv(name: str, content: str) -> ReviewFile:
    reader = csv.DictReader(io.StringIO(content, newline=""))
    try:
        fieldnames = reader.fieldnames
    except csv.Error as exc:
        raise ReviewFileError(f"{name}: row 1: {_csv_problem(exc)}") from exc
    missing = [c for c in ("key", "value", "correction") if c not in (fieldnames or [])]
    if missing:
        raise ReviewFileError(
            f"{name}: no {', '.join(missing)} column (the header must be the export's: key, path, "
            "field, position, value, confidence, match, quote, correction, reviewer)"
        )
    entries = []
    for n, row in enumerate(_rows(name, reader), 2):  # the header is row 1
        correction = uncell((row.get("correction") or "").strip())
        if not correction:
            continue  # not reviewed
        value = None if correction.lower() == NO_VALUE else correction
        item = {
            "key": uncell(row.get("key") or ""),
            "path": uncell(row.get("path") or "") or None,
            "original": uncell(row.get("value") or "") or None,
            "reviewer": row.get("reviewer"),
        }
        entries.append(_entry(name, f"row {n}", item, value))
    return ReviewFile(name, None, None, None, entries)


def _rows(name: str, reader: csv.DictReader[str]) -> Iterator[dict[str, str]]:
    """The CSV's rows; a row the csv module cannot read is a ReviewFileError naming it."""
    n = 1
    while True:
        n += 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ReviewFileError(f"{name}: row {n}: {_csv_problem(exc)}") from exc
        yield row


def _csv_problem(exc: csv.Error) -> str:
    """Why the csv module could not read a row, as the reviewer can act on it."""
    if "field larger than field limit" in str(exc):
        # No reviewed value comes near it (a company is at most 300 characters): the cell is
        # pasted text, or the file is not the exported sheet.
        return (
            f"a cell is longer than {csv.field_size_limit():,} characters, more than any value a "
            "review holds: is this the exported sheet?"
        )
    return f"not readable as CSV ({exc}): save it again as CSV UTF-8"


def _entry(name: str, where: str, item: Mapping[str, Any], raw: object) -> Entry:
    key = str(item["key"]).strip()
    try:
        document_id, field, position = parse_key(key)
    except ValueError as exc:
        raise ReviewFileError(f"{name}: {where}: {exc}") from exc
    said = {"document_id": document_id, "field": field, "position": position}
    for name_of, expected in said.items():
        if name_of in item and item[name_of] != expected:
            raise ReviewFileError(
                f"{name}: {where} (key {key}): {name_of} {item[name_of]!r} does not match the key"
            )
    try:
        value = value_of(field, raw)
    except ValueError as exc:
        raise ReviewFileError(f"{name}: {where} (key {key}): {exc}") from exc
    original, path, reviewer = item.get("original"), item.get("path"), item.get("reviewer")
    return Entry(
        where,
        key,
        document_id,
        field,
        position,
        value,
        shown(original) if isinstance(original, str | int | float) else None,
        str(path) if path else None,
        (reviewer.strip() or None) if isinstance(reviewer, str) else None,
    )


def check(review: ReviewFile, found: Mapping[int, Target]) -> str:
    """The run the review's entries correct, once every key is known: its document exists
    (`found`), belongs to the run, has the path the sheet showed and has the field (an
    extraction; a risk factor at that position), and no key comes twice."""
    run_id = review.run_id
    seen: dict[tuple[int, str, int | None], str] = {}  # by what the key names: 1:company is 01:company
    for e in review.entries:
        at = f"{review.name}: {e.where} (key {e.key})"
        named = (e.document_id, e.field, e.position)
        if named in seen:
            raise ReviewFileError(f"{at}: the key comes twice (also {seen[named]}); keep one")
        seen[named] = e.where
        target = found.get(e.document_id)
        if target is None:
            raise ReviewFileError(
                f"{at}: document {e.document_id} is not in this database (PIPELINE_DATABASE_URL)"
            )
        if run_id is None:
            run_id = target.run_id
        if target.run_id != run_id:
            raise ReviewFileError(
                f"{at}: document {e.document_id} belongs to run {target.run_id}, not to {run_id}"
            )
        if e.path is not None and e.path != target.path:
            raise ReviewFileError(
                f"{at}: the sheet's path {e.path!r} is not document {e.document_id}'s ({target.path!r}); "
                "were the rows re-ordered without their keys?"
            )
        if e.field == RISK_FIELD and e.position not in target.risk_positions:
            raise ReviewFileError(
                f"{at}: document {e.document_id} has no risk factor at position {e.position}"
            )
        if e.field != RISK_FIELD and not target.extracted:
            raise ReviewFileError(f"{at}: document {e.document_id} has no extraction to correct")
    if run_id is None:
        raise ReviewFileError(f"{review.name}: no reviewed item")
    return run_id


def reviewer_of(entry: Entry, review: ReviewFile, fallback: str | None) -> str:
    """Who reviewed `entry`: the file's name for it, else `fallback` (--reviewer, else $USER)."""
    name = entry.reviewer or review.reviewer or (fallback or "").strip()
    if not name:
        raise ReviewFileError(
            f"{review.name}: {entry.where} (key {entry.key}) names no reviewer; give --reviewer NAME"
        )
    if len(name) > REVIEWER_MAX_CHARS:
        raise ReviewFileError(
            f"{review.name}: reviewer {name[:40]!r}… is longer than {REVIEWER_MAX_CHARS} characters"
        )
    return name


def corrections_of(
    review: ReviewFile, run_id: str, fallback_reviewer: str | None, imported_at: datetime
) -> list[NewCorrection]:
    """The rows to store for a checked review, timed `imported_at` (the database's clock at the
    import): the review imported last wins. The file's `saved_at` is not used, since a file
    dated 9999 would pin its values against every later review."""
    return [
        NewCorrection(
            run_id=run_id,
            document_id=e.document_id,
            field=e.field,
            position=e.position,
            value=e.value,
            original=e.original,
            reviewer=reviewer_of(e, review, fallback_reviewer),
            reviewed_at=imported_at,
            source=review.name[:300],
        )
        for e in review.entries
    ]


def truth(reviewed: Sequence[tuple[int, str, str, str | None]]) -> dict[str, Any]:
    """A truth file (examples/truth.json's format) from (document_id, path, field, value) of
    the newest corrections: one filing per document with a reviewed company, fiscal year or
    revenue. A field not reviewed is null ("unknown": `pipeline eval` does not score it), and
    so is one reviewed as having no value (a truth file cannot say "must be empty"). No
    `risk_factor_titles`: a review of some titles is not the filing's whole list."""
    filings: dict[int, dict[str, Any]] = {}
    for document_id, path, field, value in reviewed:
        filing = filings.setdefault(
            document_id,
            {"filename": PurePath(path).name, "company": None, "fiscal_year": None, "revenue_usd": None},
        )
        if value is None:
            continue
        if field == "fiscal_year":
            filing[field] = int(value)
        elif field == "revenue_usd":
            filing[field] = float(value)
        else:
            filing[field] = value
    return {"filings": list(filings.values())}
