"""The review loop on Postgres: `pipeline review export` lists a run's low-confidence fields with
their passages, a reviewer fills the HTML sheet in Chromium (offline: no request) or the CSV, `pipeline
review import` stores the corrections all or nothing and only once, the views read them, and
`pipeline review truth` writes them as a truth file."""

from __future__ import annotations

import csv
import hashlib
import html
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, select, text

from pipeline.reporting.review_import import Entry, ReviewFile, ReviewFileError, check, parse_key, value_of
from pipeline.reporting.review_sheet import NOT_FOUND, SCRIPT_HASH
from pipeline.storage.corrections import Target
from pipeline.storage.db import get_engine, session_scope, upgrade
from pipeline.storage.models import Content, Correction, Document, Extraction, RiskFactor, Run
from tests.browser import chromium, chromium_or_skip
from tests.conftest import run_cli
from tests.review_browser import Review, save_review

PWN = '<img src="http://127.0.0.1:9/pwn.png">'
"""Model text that would fetch something if the sheet did not escape it."""
TEXT_A = (
    "ACME WIDGETS INC. ANNUAL REPORT. This report covers fiscal year 2024 for Acme Widgets Inc. "
    + "Our business makes widgets. " * 8
    + "Total revenue was $1,234.5 million, up 4 % on the year before. "
    + "Item 1A. Risk factors. Our suppliers are few. "
    + f"Attackers may breach our systems {PWN} and steal data. "
    + "We depend on one port. " * 6
)
TEXT_B = "Annual report of BETA CORP for fiscal 2023. " + "Nothing else is stated here. " * 10
BELOW = [  # what the export lists below 0.7, lowest first: (key suffix, document, confidence)
    ("revenue_usd", "b", 0.0),
    ("risk_title:2", "a", 0.1),
    ("risk_title:1", "a", 0.2),
    ("revenue_usd", "a", 0.3),
    ("company", "b", 0.4),
    ("fiscal_year", "a", 0.5),
]


@dataclass(frozen=True)
class Filings:
    run_id: str
    a: int
    b: int
    c: int

    def key(self, suffix: str, doc: str) -> str:
        return f"{getattr(self, doc)}:{suffix}"


@pytest.fixture(scope="module")
def database(postgres_url: str | None) -> tuple[str, Engine]:
    if postgres_url is None:
        pytest.skip("no Postgres server reachable (CI always has one)")
    upgrade(postgres_url)
    return postgres_url, get_engine(postgres_url)


@pytest.fixture
def filings(database: tuple[str, Engine]) -> Iterator[Filings]:
    """A run of three extracted filings: a.txt with fields above and below 0.7, b.txt with a
    company only in capitals in its text and no revenue, c.txt of a custom schema (no confidence)."""
    _, engine = database
    run_id = uuid.uuid4().hex
    texts = {name: f"{body} [{run_id}]" for name, body in (("a", TEXT_A), ("b", TEXT_B), ("c", "Custom."))}
    shas = {name: hashlib.sha256(body.encode()).hexdigest() for name, body in texts.items()}
    quote = "Total revenue was $1,234.5 million"
    breach = f"Attackers may breach our systems {PWN} and steal data."
    with session_scope(engine) as session:
        session.add(Run(id=run_id, query="q", model="m", prompt_version="p", status="completed"))
        for name, body in texts.items():
            session.add(Content(sha256=shas[name], text=body, bytes=len(body)))
        session.flush()
        docs = {
            name: Document(run_id=run_id, path=f"/filings/{name}.txt", sha256=shas[name], status="extracted")
            for name in texts
        }
        session.add_all(docs.values())
        session.flush()
        a, b, c = docs["a"].id, docs["b"].id, docs["c"].id
        start, at = texts["a"].index(quote), texts["a"].index(breach)
        revenue_quote = {
            "revenue_quote": quote,
            "revenue_quote_start": start,
            "revenue_quote_end": start + len(quote),
        }
        session.add_all(
            [
                _extraction(
                    run_id,
                    a,
                    ("Acme Widgets Inc.", 0.95),
                    (2024, 0.5),
                    (1_234_500_000.0, 0.3),
                    **revenue_quote,
                ),
                _extraction(run_id, b, ("Beta Corp", 0.4), (2023, 0.9), (None, 0.0)),
                _extraction(run_id, c, (None, None), (None, None), (None, None)),
                _risk(run_id, a, 0, "Few suppliers", "Our suppliers are few.", 0.9),
                _risk(run_id, a, 1, f"Cyber {PWN}", breach, 0.2, (at, at + len(breach))),
                _risk(run_id, a, 2, "Climate", "Storms will flood the plant.", 0.1),
            ]
        )
    yield Filings(run_id, a, b, c)
    with session_scope(engine) as session:
        session.execute(delete(Run).where(Run.id == run_id))  # documents, rows and corrections cascade
        session.execute(delete(Content).where(Content.sha256.in_(list(shas.values()))))


def _extraction(
    run_id: str,
    document_id: int,
    company: tuple[str | None, float | None],
    year: tuple[int | None, float | None],
    revenue: tuple[float | None, float | None],
    **quote: object,
) -> Extraction:
    """An extraction with each field's (value, confidence)."""
    return Extraction(
        run_id=run_id,
        document_id=document_id,
        company=company[0],
        company_confidence=company[1],
        fiscal_year=year[0],
        fiscal_year_confidence=year[1],
        revenue_usd=revenue[0],
        revenue_confidence=revenue[1],
        revenue_match="exact" if quote else None,
        data={},
        model="m",
        prompt_version="p",
        **quote,
    )


def _risk(
    run_id: str,
    document_id: int,
    position: int,
    title: str,
    quote: str,
    confidence: float,
    found: tuple[int, int] | None = None,
) -> RiskFactor:
    return RiskFactor(
        run_id=run_id,
        document_id=document_id,
        position=position,
        title=title,
        quote=quote,
        grounded=found is not None,
        quote_start=found and found[0],
        quote_end=found and found[1],
        confidence=confidence,
        match="exact" if found else "none",
    )


def cli(database: tuple[str, Engine], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`pipeline ARGS` on the test's database; its sentences, joined as one line, on stderr."""
    return run_cli(*args, env={"PIPELINE_DATABASE_URL": database[0], **env}, timeout_s=60)


def said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join(done.stderr.split())


def export(database: tuple[str, Engine], filings: Filings, out: Path) -> tuple[Path, Path]:
    done = cli(database, "review", "export", filings.run_id[:12], "--below", "0.7", "--out", str(out))
    assert done.returncode == 0, done.stderr
    run8 = filings.run_id[:8]
    assert f"{len(BELOW)} fields of run {filings.run_id} below 0.7" in said(done)
    return out / f"review-{run8}.html", out / f"review-{run8}.csv"


def csv_rows(sheet: Path) -> list[dict[str, str]]:
    with sheet.open(encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


def fill_in(sheet: Path, corrections: dict[str, str]) -> dict[str, int]:
    """Fill the CSV's `correction` column by key, saved as a spreadsheet saves it (no BOM);
    returns each key's row number as the spreadsheet shows it."""
    rows = csv_rows(sheet)
    for row in rows:
        row["correction"] = corrections.get(row["key"], "")
    with sheet.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return {row["key"]: n for n, row in enumerate(rows, 2)}


def stored_corrections(engine: Engine, run_id: str) -> list[Correction]:
    with session_scope(engine) as session:
        return list(session.scalars(select(Correction).where(Correction.run_id == run_id)))


def test_export_lists_the_fields_below_the_threshold_lowest_first_with_their_passages(
    database: tuple[str, Engine], filings: Filings, tmp_path: Path
) -> None:
    page, sheet = export(database, filings, tmp_path)
    rows = csv_rows(sheet)
    assert [(r["key"], float(r["confidence"])) for r in rows] == [
        (filings.key(suffix, doc), confidence) for suffix, doc, confidence in BELOW
    ], "every field below 0.7, none above, none of the custom schema's, lowest first"
    by_key = {r["key"]: r for r in rows}
    revenue = by_key[filings.key("revenue_usd", "a")]
    assert (revenue["path"], revenue["value"], revenue["match"], revenue["quote"]) == (
        "/filings/a.txt",
        "1234500000",
        "exact",
        "Total revenue was $1,234.5 million",
    )
    assert by_key[filings.key("revenue_usd", "b")]["value"] == "", "no value: a blank cell"
    assert by_key[filings.key("company", "b")]["match"] == "normalised", "found in capitals"
    sheet_html = page.read_text(encoding="utf-8")
    assert "<mark>Total revenue was $1,234.5 million</mark>, up 4 % on the year" in sheet_html
    assert "<mark>BETA CORP</mark> for fiscal 2023" in sheet_html
    assert "<mark>fiscal year 2024</mark>" in sheet_html
    assert NOT_FOUND in sheet_html and "Storms will flood the plant." in sheet_html
    assert PWN not in sheet_html and html.escape(PWN) in sheet_html
    csp = sheet_html.split('http-equiv="Content-Security-Policy" content="')[1].split('"')[0]
    script_src = csp.split("script-src ")[1].split(";")[0]
    assert script_src == f"'sha256-{SCRIPT_HASH}'" and "default-src 'none'" in csp


def test_export_of_an_unknown_run_says_so_in_one_sentence(
    database: tuple[str, Engine], tmp_path: Path
) -> None:
    done = cli(database, "review", "export", "nosuchrun", "--out", str(tmp_path))
    assert done.returncode == 2 and "no run matches 'nosuchrun'" in said(done), done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())


@pytest.mark.slow  # a browser
def test_a_reviewer_fills_the_sheet_offline_and_the_import_stores_it_once(
    database: tuple[str, Engine], filings: Filings, tmp_path: Path
) -> None:
    binary = chromium_or_skip()
    page, _ = export(database, filings, tmp_path)
    company, risk = filings.key("company", "b"), filings.key("risk_title:1", "a")
    year = filings.key("fiscal_year", "a")
    name = f"corrections-{filings.run_id[:8]}.json"
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    review = Review("Ada Reviewer", values={company: "Beta Corporation"}, no_value=[risk], confirm=[year])
    with chromium(binary) as ws_url:
        saved = save_review(ws_url, page, downloads, name, review)
    page_url = page.resolve().as_uri()
    assert [u for u in saved.requests if u != page_url and not u.startswith("blob:")] == [], "offline"
    assert not [m for m in saved.messages if "Content Security Policy" in m], saved.messages
    assert f"Saved 3 reviewed rows to {name}" in saved.status
    data = json.loads(saved.download.read_text(encoding="utf-8"))
    assert (data["run_id"], data["reviewer"]) == (filings.run_id, "Ada Reviewer")
    assert data["saved_at"].endswith("Z")
    assert {c["key"]: (c["value"], c["original"], c["position"]) for c in data["corrections"]} == {
        company: ("Beta Corporation", "Beta Corp", None),
        risk: (None, f"Cyber {PWN}", 1),
        year: ("2024", "2024", None),
    }, "the changed row, the no-value row and the confirmed row; nothing else"

    imported = cli(database, "review", "import", str(saved.download))
    assert imported.returncode == 0, imported.stderr
    assert "stored 3 of 3 reviewed fields" in said(imported) and "(2 corrections, 1 confirmation)" in said(
        imported
    )
    again = cli(database, "review", "import", str(saved.download))
    assert again.returncode == 0 and "stored 0 of 3" in said(again) and "3 were already stored" in said(again)
    rows = stored_corrections(database[1], filings.run_id)
    assert sorted(
        (r.document_id, r.field, r.position, r.value, r.reviewer, r.source) for r in rows
    ) == sorted(
        [
            (filings.b, "company", None, "Beta Corporation", "Ada Reviewer", name),
            (filings.a, "risk_title", 1, None, "Ada Reviewer", name),
            (filings.a, "fiscal_year", None, "2024", "Ada Reviewer", name),
        ]
    )
    with database[1].connect() as conn:
        b = conn.execute(
            text(
                "select company, company_reviewed, fiscal_year, fiscal_year_reviewed "
                "from reviewed_extractions where document_id = :d"
            ),
            {"d": filings.b},
        ).one()
        assert tuple(b) == ("Beta Corporation", True, 2023, False)
        risks = conn.execute(
            text(
                "select position, rejected from reviewed_risk_factors where document_id = :d order by position"
            ),
            {"d": filings.a},
        ).all()
        assert [tuple(r) for r in risks] == [(0, False), (1, True), (2, False)]

    # The round trip's end: the reviews as a truth file, which eval scores the run against.
    truth = tmp_path / "reviewed-truth.json"
    assert cli(database, "review", "truth", filings.run_id, "-o", str(truth)).returncode == 0
    scored = cli(database, "eval", filings.run_id, "--truth", str(truth), "--json")
    assert scored.returncode == 0, scored.stderr
    overall = json.loads(scored.stdout)["overall"]
    assert (overall["fiscal_year"], overall["company_normalised"]) == (1.0, 1.0), overall
    assert overall["revenue"] is None, "no revenue was reviewed: not scored"


def test_a_csv_with_a_bad_fiscal_year_stores_nothing_and_names_the_row(
    database: tuple[str, Engine], filings: Filings, tmp_path: Path
) -> None:
    _, sheet = export(database, filings, tmp_path)
    year = filings.key("fiscal_year", "a")
    rows = fill_in(sheet, {filings.key("company", "b"): "Beta Co", year: "20x4"})
    done = cli(database, "review", "import", str(sheet), "--reviewer", "Bo")
    assert done.returncode == 2, done.stderr
    assert f"{sheet.name}: row {rows[year]} (key {year}): fiscal_year '20x4' is not a year" in said(done)
    assert "Traceback" not in done.stderr
    assert stored_corrections(database[1], filings.run_id) == [], "all or nothing"


def _saved_review(path: Path, run_id: str, saved_at: str, corrections: dict[str, str]) -> Path:
    """A review as the sheet saves it (JSON), with the `saved_at` it claims."""
    data = {
        "run_id": run_id,
        "reviewer": "Ada",
        "saved_at": saved_at,
        "corrections": [{"key": k, "value": v} for k, v in corrections.items()],
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_review_imported_last_wins_whatever_time_its_file_claims(
    database: tuple[str, Engine], filings: Filings, tmp_path: Path
) -> None:
    company = filings.key("company", "b")
    future = _saved_review(
        tmp_path / "future.json", filings.run_id, "9999-01-01T00:00:00Z", {company: "Pinned"}
    )
    past = _saved_review(tmp_path / "past.json", filings.run_id, "2001-01-01T00:00:00Z", {company: "Beta Co"})

    def company_b() -> str:
        with database[1].connect() as conn:
            return str(
                conn.execute(
                    text("select company from reviewed_extractions where document_id = :d"), {"d": filings.b}
                ).scalar_one()
            )

    for review, expected in ((future, "Pinned"), (past, "Beta Co"), (future, "Pinned")):
        done = cli(database, "review", "import", str(review))
        assert done.returncode == 0, done.stderr
        assert company_b() == expected, f"{review.name} was imported last"
    again = cli(database, "review", "import", str(future))
    assert "stored 0 of 1" in said(again) and "1 were already stored" in said(again), "it says so already"
    with database[1].connect() as conn:
        db_now = conn.execute(text("select statement_timestamp()")).scalar_one()
    rows = stored_corrections(database[1], filings.run_id)
    assert len(rows) == 3 and all(r.reviewed_at <= db_now for r in rows), "the import's time, not the file's"
    assert [r.source for r in sorted(rows, key=lambda r: r.reviewed_at)] == [
        future.name,
        past.name,
        future.name,
    ]


def test_a_cell_longer_than_csv_allows_is_a_file_error_naming_the_row(
    database: tuple[str, Engine], filings: Filings, tmp_path: Path
) -> None:
    _, sheet = export(database, filings, tmp_path)
    company = filings.key("company", "b")
    rows = fill_in(sheet, {company: "x" * 131_073})
    done = cli(database, "review", "import", str(sheet), "--reviewer", "Bo")
    assert done.returncode == 2, done.stderr
    assert f"{sheet.name}: row {rows[company]}: a cell is longer than 131,072 characters" in said(done)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert stored_corrections(database[1], filings.run_id) == []


def test_truth_holds_the_reviewed_values_and_null_for_the_rest(
    database: tuple[str, Engine], filings: Filings, tmp_path: Path
) -> None:
    _, sheet = export(database, filings, tmp_path)
    fill_in(
        sheet,
        {
            filings.key("fiscal_year", "a"): "2025",
            filings.key("revenue_usd", "a"): "$1.3 billion",
            filings.key("company", "b"): "none",
            filings.key("risk_title:1", "a"): "Cybersecurity",
        },
    )
    nobody = cli(database, "review", "import", str(sheet), USER="")
    assert nobody.returncode == 2 and "give --reviewer NAME" in said(nobody), nobody.stderr
    assert stored_corrections(database[1], filings.run_id) == []
    imported = cli(database, "review", "import", str(sheet), "--reviewer", "Bo")
    assert imported.returncode == 0, imported.stderr
    assert "stored 4 of 4 reviewed fields" in said(imported) and "(4 corrections, 0 confirmations)" in said(
        imported
    )
    truth = tmp_path / "truth.json"
    done = cli(database, "review", "truth", filings.run_id, "-o", str(truth))
    assert done.returncode == 0, done.stderr
    assert json.loads(truth.read_text(encoding="utf-8")) == {
        "filings": [
            {"filename": "a.txt", "company": None, "fiscal_year": 2025, "revenue_usd": 1.3e9},
            {"filename": "b.txt", "company": None, "fiscal_year": None, "revenue_usd": None},
        ]
    }, "reviewed values; null where not reviewed, or reviewed as no value; no risk titles"
    with database[1].connect() as conn:
        a = conn.execute(
            text("select fiscal_year, revenue_usd from reviewed_extractions where document_id = :d"),
            {"d": filings.a},
        ).one()
    assert tuple(a) == (2025, 1.3e9)


@pytest.mark.parametrize(
    ("field", "raw", "stored"),
    [
        ("revenue_usd", "1,234.5", "1234.5"),
        ("revenue_usd", "$1.2 billion", "1200000000"),
        ("revenue_usd", "USD 3.4m", "3400000"),
        ("revenue_usd", 12780000000, "12780000000"),
        ("revenue_usd", "1.278E+10", "12780000000"),
        ("fiscal_year", " 2024 ", "2024"),
        ("fiscal_year", 2024.0, "2024"),
        ("company", "  Acme  ", "Acme"),
        ("company", "", None),
    ],
)
def test_values_are_stored_as_the_views_cast_them(field: str, raw: object, stored: str | None) -> None:
    assert value_of(field, raw) == stored


@pytest.mark.parametrize(
    ("field", "raw", "reason"),
    [
        ("revenue_usd", "-5", "must not be negative"),
        ("revenue_usd", "1,23", "is not an amount"),
        ("revenue_usd", "2 lakh", "is not an amount"),
        ("fiscal_year", "1949", "is not a year from 1950 to 2100"),
        ("fiscal_year", True, "must be text or a number"),
    ],
)
def test_a_value_that_is_not_one_says_why(field: str, raw: object, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        value_of(field, raw)


@pytest.mark.parametrize(
    ("key", "path", "reason"),
    [
        ("9:company", None, "document 9 is not in this database"),
        ("2:company", None, "document 2 belongs to run other, not to run1"),
        ("1:risk_title:5", None, "document 1 has no risk factor at position 5"),
        ("3:fiscal_year", None, "document 3 has no extraction to correct"),
        ("1:company", "b.txt", "the sheet's path 'b.txt' is not document 1's ('a.txt')"),
        ("1:risk_title:0", None, "the key comes twice (also correction 1)"),
        ("01:risk_title:0", None, "the key comes twice (also correction 1)"),
        ("1:risk_title:00", None, "the key comes twice (also correction 1)"),
    ],
)
def test_a_key_the_run_does_not_have_is_refused_before_anything_is_stored(
    key: str, path: str | None, reason: str
) -> None:
    found = {
        1: Target("run1", "a.txt", extracted=True, risk_positions={0}),
        2: Target("other", "b.txt", extracted=True),
        3: Target("run1", "c.txt"),
    }
    entries = [
        Entry("correction 1", "1:risk_title:0", 1, "risk_title", 0, None, "Cyber", None, None),
        Entry("correction 2", key, *parse_key(key), "x", None, path, None),
    ]
    with pytest.raises(ReviewFileError) as refused:
        check(ReviewFile("c.json", "run1", "Ada", None, entries), found)
    assert str(refused.value).startswith(f"c.json: correction 2 (key {key}): {reason}"), refused.value


def test_a_quote_found_only_approximately_is_highlighted_where_it_lies() -> None:
    from pipeline.reporting.review_sheet import items_of
    from pipeline.storage.corrections import FieldRow

    filing = "Intro.\nTotal revenue for fiscal 2025 was $1,234.5 million, an increase of 12%.\nOutro."
    reworded = "Total revenue for fiscal 2025 was $1,234.5 million, a rise of 12%."
    row = FieldRow(1, "a.txt", None, "revenue_usd", None, 1.2345e9, 0.2, "fuzzy", reworded, None, None)
    (item,) = items_of([row], filing)
    assert item.passage is not None and "$1,234.5 million, an increase" in item.passage.marked
