"""The review sheet of a run's low-confidence fields (pure): one self-contained HTML page a
person fills in offline, and the same items as CSV for a spreadsheet.

Each item shows the field's value, its confidence and the filing's passage around its quote (or,
for company and fiscal year, which have no quote, around the value itself), so the reviewer
checks the value against the filing without opening it. The page's one script saves what was
reviewed as `corrections-<run8>.json`; `pipeline review import` reads that file or the CSV.

The page loads nothing: its Content-Security-Policy allows only its own style and the one
inline script whose hash it names, and every string from a filing or a model is escaped.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rapidfuzz import fuzz

from pipeline.extraction.confidence import FUZZY_CUTOFF
from pipeline.extraction.grounding import Match, Source
from pipeline.reporting.html_parts import Html, join, tag, text
from pipeline.storage.corrections import FieldRow

PASSAGE_CHARS = 400
"""About this much of the filing is shown around a quote (more when the quote is longer)."""
MIN_SIDE_CHARS = 60
"""At least this much text on each side of a long quote."""
NOT_FOUND = "quote not found in the filing"
CSV_COLUMNS = (
    "key",
    "path",
    "field",
    "position",
    "value",
    "confidence",
    "match",
    "quote",
    "correction",
    "reviewer",
)
"""The CSV's header; the reviewer fills `correction` (and may fill `reviewer`)."""
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""A cell starting with one of these is a formula to a spreadsheet: filing text must not run."""


@dataclass(frozen=True)
class Passage:
    """The filing's text around a quote: `before`, the quote as it stands in the filing, `after`."""

    before: str
    marked: str
    after: str


@dataclass(frozen=True)
class ReviewItem:
    key: str
    """`<document_id>:<field>`, or `<document_id>:risk_title:<position>`."""
    document_id: int
    path: str
    field: str
    position: int | None
    value: str | None
    """The value as the sheet shows it (`shown`); None: the field has none."""
    confidence: float
    match: str
    """How the quote (or, for company and fiscal year, the value) was found in the filing:
    exact, normalised, fuzzy or none."""
    quote: str | None
    passage: Passage | None
    note: str
    """Why there is no passage ("" when there is one)."""
    filed: str | None = None
    """What the filing's own inline XBRL states for the field, shown beside the model's value."""
    source_byte: int | None = None
    """Where the passage's line starts in the original file (an HTML filing, a submission),
    in bytes; None for plain text, whose offsets are the text's own."""


def item_key(document_id: int, field: str, position: int | None) -> str:
    return f"{document_id}:{field}" if position is None else f"{document_id}:{field}:{position}"


def shown(value: object) -> str | None:
    """A field's value as text: the sheet shows it, a correction stores it, and the views cast
    it back (a revenue as a plain number, "12780000000" or "1234.5")."""
    if value is None:
        return None
    if isinstance(value, float):
        plain = f"{value:.6f}".rstrip("0").rstrip(".")
        return "0" if plain in ("", "-0") else plain
    return str(value)


def items_of(
    rows: Sequence[FieldRow], filing: str | None, offsets: Sequence[Sequence[int]] = ()
) -> list[ReviewItem]:
    """The review items of one document's fields, `filing` being its text (None: not stored)
    and `offsets` its map back to the source file (`contents.source_offsets`)."""
    source = Source(filing) if filing is not None else None
    starts = [pair[0] for pair in offsets]
    items = []
    for row in rows:
        value = shown(row.value)
        found = _locate(row, value, source) if source is not None else None
        match = row.match or (found.how if found else "none")
        if source is None:
            note = "the filing's text is no longer stored (`pipeline prune`)"
        elif found is None:
            note = NOT_FOUND if (row.quote or value) else "no value was extracted"
        else:
            note = ""
        items.append(
            ReviewItem(
                key=item_key(row.document_id, row.field, row.position),
                document_id=row.document_id,
                path=row.path,
                field=row.field,
                position=row.position,
                value=value,
                confidence=row.confidence,
                match=match,
                quote=row.quote,
                passage=passage(source.text, found.start, found.end) if source and found else None,
                note=note,
                source_byte=offsets[bisect_right(starts, found.start) - 1][1] if found and starts else None,
                filed=f"{shown(row.filed)} ({row.filed_concept})" if row.filed is not None else None,
            )
        )
    return items


def lowest_first(items: Sequence[ReviewItem]) -> list[ReviewItem]:
    return sorted(items, key=lambda i: (i.confidence, i.path, i.document_id, i.field, i.position or 0))


def _locate(row: FieldRow, value: str | None, source: Source) -> Match | None:
    """Where the field's evidence lies: its quote's stored offsets, else its quote looked up
    again, else (company, fiscal year) the value itself, case and spacing ignored."""
    start, end = row.quote_start, row.quote_end
    if start is not None and end is not None and 0 <= start < end <= len(source.text):
        return Match(start, end, row.match or "exact")
    if row.quote:
        found = source.find(row.quote)
        if found is None and row.match == "fuzzy":  # found approximately when it was scored
            found = _nearest(row.quote, source.text)
        return found
    if value is None or row.field not in ("company", "fiscal_year"):
        return None
    wanted = (f"fiscal year {value}", f"fiscal {value}", value) if row.field == "fiscal_year" else (value,)
    return next((m for m in map(source.find, wanted) if m is not None), None)


def _nearest(quote: str, filing: str) -> Match | None:
    """The stretch of the filing most like `quote` (rapidfuzz's partial ratio, at least
    FUZZY_CUTOFF), for a quote that confidence scoring found only approximately."""
    hit = fuzz.partial_ratio_alignment(quote.strip().lower(), filing.lower(), score_cutoff=FUZZY_CUTOFF)
    return None if hit is None else Match(hit.dest_start, hit.dest_end, "fuzzy")


def passage(filing: str, start: int, end: int) -> Passage:
    """About PASSAGE_CHARS of `filing` around `filing[start:end]`, cut at spaces, with an
    ellipsis where the filing goes on."""
    side = max(MIN_SIDE_CHARS, (PASSAGE_CHARS - (end - start)) // 2)
    left, right = max(0, start - side), min(len(filing), end + side)
    if left > 0:
        space = filing.find(" ", left, start)
        left = space + 1 if space != -1 else left
    if right < len(filing):
        space = filing.rfind(" ", end, right)
        right = space if space != -1 else right
    before = ("…" if left > 0 else "") + filing[left:start]
    after = filing[end:right] + ("…" if right < len(filing) else "")
    return Passage(before, filing[start:end], after)


def sheet_csv(items: Sequence[ReviewItem]) -> str:
    """The items as CSV, `correction` and `reviewer` left blank for the reviewer."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    for i in items:
        cells = [i.key, i.path, i.field, i.position, i.value, f"{i.confidence:.3f}", i.match, i.quote, "", ""]
        writer.writerow([_cell(c) for c in cells])
    return out.getvalue()


def _cell(value: object) -> str:
    """A CSV cell a spreadsheet shows as text: a leading formula character gets an apostrophe
    (the import takes it off again)."""
    cell = "" if value is None else str(value)
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def uncell(cell: str) -> str:
    """A cell as `_cell` wrote it, back to its value."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(FORMULA_STARTS) else cell


SCRIPT = """
"use strict";
(() => {
  const table = document.getElementById("items");
  const status = document.getElementById("status");
  const reviewer = document.getElementById("reviewer");
  const fileName = "corrections-" + table.dataset.run8 + ".json";
  for (const row of table.querySelectorAll("tr.item")) {
    const box = row.querySelector("input.value");
    const reviewed = row.querySelector("input.reviewed");
    const none = row.querySelector("input.novalue");
    box.disabled = none.checked;
    box.addEventListener("input", () => { reviewed.checked = true; });
    none.addEventListener("change", () => { box.disabled = none.checked; reviewed.checked = true; });
  }
  const correction = (row) => ({
    key: row.dataset.key,
    document_id: Number(row.dataset.documentId),
    path: row.dataset.path,
    field: row.dataset.field,
    position: row.dataset.position === "" ? null : Number(row.dataset.position),
    value: row.querySelector("input.novalue").checked ? null : row.querySelector("input.value").value,
    original: row.hasAttribute("data-original") ? row.dataset.original : null,
  });
  document.getElementById("save").addEventListener("click", () => {
    const rows = [...table.querySelectorAll("tr.item")]
      .filter((row) => row.querySelector("input.reviewed").checked);
    if (!rows.length) {
      status.textContent = "No row is ticked reviewed: nothing to save.";
      return;
    }
    const name = reviewer.value.trim();
    const data = {
      run_id: table.dataset.runId,
      reviewer: name,
      saved_at: new Date().toISOString(),
      corrections: rows.map(correction),
    };
    const blob = new Blob([JSON.stringify(data, null, 2) + "\\n"], {type: "application/json"});
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = fileName;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 60000);
    status.textContent = "Saved " + rows.length + (rows.length === 1 ? " reviewed row" : " reviewed rows") +
      " to " + fileName +
      " (the browser's downloads folder); next: pipeline review import " + fileName +
      (name ? "" : " --reviewer NAME (no reviewer name was given)");
  });
})();
"""
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode("utf-8")).digest()).decode("ascii")
CSP = (
    f"default-src 'none'; script-src 'sha256-{SCRIPT_HASH}'; style-src 'unsafe-inline'; "
    "base-uri 'none'; form-action 'none'"
)
"""Nothing loads; the one inline script runs because its hash is named (no 'unsafe-inline')."""
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0 auto;
max-width:90rem;padding:1rem 1.5rem 3rem;color:#1d232a;line-height:1.45}
h1{font-size:1.5rem;margin:.4rem 0}.meta,.note,.hint{color:#56616c}.note,.hint{font-size:.85rem}
.bar{position:sticky;top:0;background:#fff;padding:.6rem 0;border-bottom:1px solid #d6dbe0;z-index:1}
.bar input{font:inherit;padding:.2rem .4rem}.bar button{font:inherit;padding:.25rem .9rem;margin-left:.6rem}
#status{margin-left:.8rem;color:#1e6b35}table{border-collapse:collapse;width:100%;font-size:.88rem;margin:.6rem 0}
th,td{border-bottom:1px solid #e3e7eb;padding:.4rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f3f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.value{min-width:16rem}td.value input.value{width:100%;box-sizing:border-box;font:inherit;padding:.2rem .3rem}
td.value label{display:inline-block;margin:.3rem .8rem 0 0;white-space:nowrap}
.passage{white-space:pre-wrap;overflow-wrap:anywhere;margin:0;padding:.4rem .6rem;background:#f6f8fa;
border-left:3px solid #c9d1d9;max-width:48rem}mark{background:#ffe58a}.quote{overflow-wrap:anywhere}
"""


def sheet_html(run_id: str, below: float, items: Sequence[ReviewItem], made_at: datetime) -> str:
    """The whole sheet for `items` (already in the order to show)."""
    run8 = run_id[:8]
    rows = join(_row(n, item) for n, item in enumerate(items, 1))
    head = join(tag("th", h) for h in ("#", "Filing", "Field", "Confidence", "Value", "In the filing"))
    table = Html(
        f'<table id="items" data-run-id="{text(run_id)}" data-run8="{text(run8)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    )
    howto = join(
        [
            "Correct a value in its box, or tick “no value” when the field should be empty (or the "
            "risk is not one): a changed row is ticked “reviewed”. Tick “reviewed” alone to confirm "
            f"a value as it is. Save downloads corrections-{run8}.json; then run ",
            tag("code", f"pipeline review import corrections-{run8}.json"),
            ".",
        ]
    )
    body = join(
        [
            tag("h1", f"Review: run {run_id}"),
            tag(
                "p",
                f"{len(items)} fields with a confidence below {below:g}, lowest first; "
                f"made {made_at:%Y-%m-%d %H:%M} UTC.",
                "meta",
            ),
            tag("p", howto, "note"),
            Html(
                '<div class="bar"><label>Reviewer <input id="reviewer" type="text" autocomplete="name">'
                '</label><button id="save" type="button">Save corrections</button>'
                '<span id="status" role="status"></span></div>'
            ),
            table,
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text('Review: run ' + run8)}</title><style>{STYLE}</style></head>"
        f"<body>{body}<script>{SCRIPT}</script></body></html>\n"
    )


def _row(n: int, item: ReviewItem) -> Html:
    original = "" if item.value is None else f' data-original="{text(item.value)}"'
    attributes = (
        f'class="item" data-key="{text(item.key)}" data-document-id="{item.document_id}" '
        f'data-path="{text(item.path)}" data-field="{text(item.field)}" '
        f'data-position="{"" if item.position is None else item.position}"{original}'
    )
    field = item.field if item.position is None else f"{item.field} #{item.position}"
    cells = [
        tag("td", str(n), "num"),
        tag("td", item.path),
        tag("td", field),
        tag("td", join([f"{item.confidence:.2f}", Html("<br>"), tag("span", item.match, "hint")]), "num"),
        tag("td", _value_cell(item), "value"),
        tag("td", _evidence(item)),
    ]
    return Html(f"<tr {attributes}>{join(cells)}</tr>")


def _value_cell(item: ReviewItem) -> Html:
    label = text(f"value of {item.key}")
    empty = item.value is None
    hint = ""
    if item.field == "revenue_usd" and item.value is not None:
        hint = tag("div", f"USD {float(item.value):,.2f}".removesuffix(".00"), "hint")
    if item.filed is not None:
        hint = join([hint, tag("div", f"the filing's XBRL: {item.filed}", "hint")])
    return join(
        [
            Html(f'<input class="value" type="text" value="{text(item.value)}" aria-label="{label}">'),
            hint,
            Html('<label><input class="reviewed" type="checkbox"> reviewed</label>'),
            Html(
                f'<label><input class="novalue" type="checkbox"{" checked" if empty else ""}> no value</label>'
            ),
        ]
    )


def _evidence(item: ReviewItem) -> Html:
    parts: list[str] = []
    if item.passage is not None:
        p = item.passage
        parts.append(Html(f'<p class="passage">{text(p.before)}{tag("mark", p.marked)}{text(p.after)}</p>'))
        if item.source_byte is not None:
            parts.append(tag("p", f"in {item.path} from byte {item.source_byte:,}", "where"))
    else:
        parts.append(tag("p", item.note, "note"))
        if item.quote:
            parts.append(tag("p", f"“{item.quote}”", "quote"))
    return join(parts)
