"""The EDGAR intake as table tests (pure): fixture in, expected text and metadata out.

Every fixture under tests/fixtures/edgar/ was written for these tests (none is a real filing)
and says at its top which structure of real filings it reproduces. A `name.expected.txt` beside
an HTML fixture is its converted text, exactly.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import pytest

from pipeline.ingest.filing import choose, html, metadata, sgml
from pipeline.ingest.filing.read import Intake, read
from pipeline.ingest.injection import detect
from pipeline.ingest.inputs import Reading, load_bytes
from pipeline.ingest.sections import locate

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "edgar"
EXHIBITS = ["EX-13*", "EX-99*"]
SUBMISSIONS = ["sec_header_10k.txt", "submission_header_10k_cr.txt"]
_UUENCODED_LINE = re.compile(r"^M[\x20-\x60]{60}$", re.MULTILINE)


def _bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def _read(name: str, form_types: list[str] | None = None) -> Intake:
    return read(_bytes(name), exhibit_types=EXHIBITS, form_types=form_types or ["*"])


# --- HTML to text -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["ixbrl_10k", "ixbrl_10q", "heading_in_spans", "table_across_pages", "entities_and_hidden"]
)
def test_html_converts_to_exactly_the_expected_text(name: str) -> None:
    expected = (FIXTURES / f"{name}.expected.txt").read_text(encoding="utf-8")
    assert html.convert(_bytes(f"{name}.htm")).text == expected


def test_headings_start_lines_whatever_spans_and_spaces_they_are_split_over() -> None:
    lines = _read("ixbrl_10k.htm").text.splitlines()  # type: ignore[union-attr]
    assert "Item 1A. Risk Factors" in lines
    assert (
        "ITEM 7. MANAGEMENT’S DISCUSSION AND ANALYSIS OF FINANCIAL CONDITION AND RESULTS OF OPERATIONS"
        in lines
    )
    assert "Item 8. Financial Statements and Supplementary Data" in lines
    spans = html.convert(_bytes("heading_in_spans.htm")).text.splitlines()
    assert spans[0] == "Item 1A. Risk Factors" and "ITEM 7." in spans
    assert "Demand for our instruments may fall when utility budgets shrink." in spans


def test_a_statement_split_across_pages_reads_as_one_table_of_rows() -> None:
    text = _read("ixbrl_10k.htm").text or ""
    rows = [
        "2024 | 2023",
        "Revenue | $184.2 | $169.0",
        "Cost of revenue | 112.4 | 99.7",
        "Gross profit | 71.8 | 69.3",
        "Operating expenses | 67.5 | 61.2",
        "Restructuring charge | 7.4 | —",
        "Net income (loss) | $(3.1) | $5.6",
        "Gross margin | 39% | 41%",
    ]
    assert "\n".join(rows) in text, "the rows run on across the page break, nothing between them"


def test_page_numbers_and_running_headers_are_dropped() -> None:
    for name in ("ixbrl_10k.htm", "ixbrl_10q.htm", "table_across_pages.htm"):
        lines = (_read(name).text or "").splitlines()
        assert not any(re.fullmatch(r"(?:- )?\d{1,3}(?: -)?", line) for line in lines), name
        assert "Table of Contents" not in lines
        assert not any("Form 10-K |" in line or "QUARTERLY REPORT" in line for line in lines), name
        assert not any(line.endswith("Annual Report 2024") for line in lines), name


def test_no_css_script_ix_header_or_hidden_text_reaches_the_text() -> None:
    for name in ("ixbrl_10k.htm", "ixbrl_10q.htm", "entities_and_hidden.htm"):
        text = _read(name).text or ""
        for leak in ("font-", "style", "{", "<", "xbrli", "iso4217", "contextRef", "0000999001", "FY"):
            assert leak not in text, (name, leak)
        for hidden in ("HIDDEN", "SCRIPT TEXT", "not text", "hpi-2024"):
            assert hidden not in text, (name, hidden)


def test_entities_are_decoded() -> None:
    text = html.convert(_bytes("entities_and_hidden.htm")).text
    assert "The Company’s “Smart Meter” line — launched in 2019 — serves Harrow & Pike customers." in text
    assert "&" + "#" not in text and "&amp;" not in text and "\u00a0" not in text and "\u200b" not in text


def test_continued_text_blocks_are_read_once_in_place() -> None:
    text = _read("ixbrl_10k.htm").text or ""
    note = text.index("Note 1. Significant Accounting Policies\nRevenue from instruments is recognised")
    assert text.count("Revenue from instruments is recognised") == 1
    assert note < text.index("Note 2. Restructuring")


@pytest.mark.parametrize("name", ["ixbrl_10k.htm", "ixbrl_10q.htm", *SUBMISSIONS, "8k_ex99.txt"])
def test_each_line_points_at_the_source_bytes_it_came_from(name: str) -> None:
    data = _bytes(name)
    intake = _read(name)
    text = intake.text or ""
    offsets = intake.offsets
    assert offsets and offsets[0][0] == 0
    for i, (at, source) in enumerate(offsets):
        end = offsets[i + 1][1] if i + 1 < len(offsets) and offsets[i + 1][1] > source else len(data)
        word = re.search(r"[A-Za-z]{3,}", text[at : text.find("\n", at)])
        if word is None or text.startswith("[EX-", at):
            continue
        assert data[source : source + 1] == b"<", (name, text[at : at + 40])
        assert word.group(0).encode() in data[source:end], (
            name,
            text[at : at + 40],
            data[source : source + 80],
        )


# --- Submissions ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", SUBMISSIONS)
def test_a_submission_sends_its_primary_document_and_ex13_only(name: str) -> None:
    intake = _read(name)
    assert intake.problem is None and intake.format == "submission"
    assert [(t["type"], t["filename"], t["format"]) for t in intake.taken] == [
        ("10-K", "hpi-20241231.htm", "html"),
        ("EX-13", "hpi-ex13.htm", "html"),
    ]
    text = intake.text or ""
    assert "Item 8. Financial Statements and Supplementary Data" in text
    assert "[EX-13: ANNUAL REPORT TO SHAREHOLDERS]\n" in text
    assert "Revenue | $184.2 | $169.0\nNet income (loss) | $(3.1) | $5.6" in text, "EX-13's statements"


@pytest.mark.parametrize("name", SUBMISSIONS)
def test_every_part_left_out_is_counted_with_its_reason(name: str) -> None:
    intake = _read(name)
    assert dict(intake.left_out) == {
        choose.UUENCODED: 2,  # GRAPHIC g1.jpg, the XBRL ZIP
        choose.RENDERED: 3,  # R1.htm, FilingSummary.xml, MetaLinks.json
        choose.XBRL_DATA: 2,  # EX-101.SCH, EX-101.INS
        choose.SCRIPT_OR_STYLE: 2,  # Show.js, report.css
        choose.EXHIBIT_NOT_TAKEN: 1,  # EX-31.1
    }
    assert intake.left_out_types[choose.UUENCODED] == ["GRAPHIC", "ZIP"]
    assert intake.left_out_types[choose.EXHIBIT_NOT_TAKEN] == ["EX-31.1"]
    assert sum(entry["count"] for entry in intake.summary()["left_out"]) == 10


@pytest.mark.parametrize("name", [*SUBMISSIONS, "8k_ex99.txt", "pem_10k_text.txt"])
def test_no_uuencoded_xbrl_script_or_rendering_content_is_sent(name: str) -> None:
    text = _read(name).text or ""
    assert "begin 644" not in text and not _UUENCODED_LINE.search(text)
    for leak in ("Show.", "authRefData", "FilingSummary", '"version"', "xs:schema", "184200000", "certify"):
        assert leak not in text, leak
    assert "<DOCUMENT>" not in text and "</TEXT>" not in text


def test_both_header_styles_give_the_same_filing() -> None:
    colon, tags = (_read(name) for name in SUBMISSIONS)
    assert b"\n" not in _bytes(SUBMISSIONS[1]), "the tag-style fixture keeps CR-only line ends"
    assert colon.text == tags.text
    assert colon.meta == tags.meta
    assert colon.summary() == tags.summary()


@pytest.mark.parametrize("name", SUBMISSIONS)
def test_the_header_gives_accession_and_dates_and_dei_gives_the_rest(name: str) -> None:
    header = metadata.from_header(sgml.parse(_bytes(name)).header)
    assert header == metadata.Metadata(
        company="HARROW & PIKE INSTRUMENTS INC",
        cik="0000999001",
        form="10-K",
        period=date(2024, 12, 31),
        fiscal_year=2024,
        accession="0000999001-25-000007",
        filed=date(2025, 2, 14),
        source=header.source,
    )
    meta = _read(name).meta
    assert (meta.company, meta.cik, meta.form, meta.period, meta.fiscal_year) == (
        "Harrow & Pike Instruments, Inc.",
        "0000999001",
        "10-K",
        date(2024, 12, 31),
        2024,
    )
    assert (meta.accession, meta.filed) == ("0000999001-25-000007", date(2025, 2, 14))
    assert meta.source["company"] == metadata.INLINE_XBRL and meta.source["filed"] == metadata.SGML_HEADER


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "ixbrl_10k.htm",
            ("Harrow & Pike Instruments, Inc.", "0000999001", "10-K", date(2024, 12, 31), 2024),
        ),
        ("ixbrl_10q.htm", ("Harrow & Pike Instruments, Inc.", "0000999001", "10-Q", date(2024, 6, 30), 2024)),
        ("8k_ex99.txt", ("HARROW & PIKE INSTRUMENTS INC", "0000999001", "8-K", date(2025, 4, 29), None)),
        ("form4.txt", ("HARROW & PIKE INSTRUMENTS INC", "0000999001", "4", date(2025, 1, 8), None)),
        ("pem_10k_text.txt", ("OSPREY LAKE MILLING CO", "0000999002", "10-K", date(1996, 12, 31), 1996)),
    ],
)
def test_metadata_comes_from_the_filing_itself(name: str, expected: tuple[object, ...]) -> None:
    meta = _read(name).meta
    assert (meta.company, meta.cik, meta.form, meta.period, meta.fiscal_year) == expected


def test_a_form_4s_company_is_its_issuer_not_its_reporting_owner() -> None:
    intake = _read("form4.txt")
    assert intake.meta.company == "HARROW & PIKE INSTRUMENTS INC" and intake.meta.cik == "0000999001"
    assert [t["format"] for t in intake.taken] == ["xml"]
    assert "issuer / issuerName: Harrow & Pike Instruments, Inc." in (intake.text or "")


def test_an_8k_sends_its_press_release_and_leaves_its_logo_out() -> None:
    intake = _read("8k_ex99.txt")
    assert [t["type"] for t in intake.taken] == ["8-K", "EX-99.1"]
    assert dict(intake.left_out) == {choose.UUENCODED: 1}
    assert "[EX-99.1: PRESS RELEASE]\nHarrow & Pike Reports First Quarter 2025 Results\n" in (
        intake.text or ""
    )
    assert "Revenue | $49.8 | $44.9" in (intake.text or "")


def test_a_pem_wrapped_plain_text_10k_loses_its_layout_tags_and_page_breaks() -> None:
    intake = _read("pem_10k_text.txt")
    text = intake.text or ""
    assert intake.problem is None and intake.taken[0]["format"] == "text"
    assert dict(intake.left_out) == {choose.EXHIBIT_NOT_TAKEN: 1}  # EX-27
    assert not re.search(r"</?(?:PAGE|TABLE|CAPTION|S|C)>", text)
    assert "PRIVACY-ENHANCED" not in text and "MIC-Info" not in text
    assert re.search(r"^Net sales\.+  \$ 41,318      \$ 38,902$", text, re.MULTILINE), (
        "columns keep their places"
    )
    assert not any(line.strip() and not line.strip().strip("-") for line in text.splitlines())
    assert not any(re.fullmatch(r"\s*\d{1,3}\s*", line) for line in text.splitlines())


# --- Sections ------------------------------------------------------------------------------


def test_a_10ks_items_are_found_and_its_table_of_contents_is_not_taken() -> None:
    text = _read("ixbrl_10k.htm").text or ""
    found = locate(text, "10-K")
    assert found.doubted == []
    starts = {s.name: s.start for s in found.sections}
    assert [s.name for s in found.sections if s.name != "Cover"] == ["Item 1", "Item 1A", "Item 7", "Item 8"]
    for name, heading in [
        ("Item 1A", "Item 1A. Risk Factors\n"),
        ("Item 7", "ITEM 7. MANAGEMENT’S DISCUSSION"),
        ("Item 8", "Item 8. Financial Statements and Supplementary Data\nCONSOLIDATED"),
    ]:
        assert text.startswith(heading, starts[name]), name
    assert starts["Item 1"] > text.index("TABLE OF CONTENTS")
    assert text.index("Item 1A. | Risk Factors | 3") < starts["Item 1"], (
        "the contents table stays in the cover"
    )


def test_a_10qs_items_are_named_with_their_part() -> None:
    text = _read("ixbrl_10q.htm").text or ""
    found = locate(text, "10-Q")
    names = {s.name: s for s in found.sections}
    assert {"Part I, Item 1", "Part I, Item 2", "Part II, Item 1", "Part II, Item 1A"} <= set(names)
    assert text.startswith(
        "Item 1A. Risk Factors\nThere have been no material changes", names["Part II, Item 1A"].start
    )
    assert text.startswith("Item 1. Financial Statements\n", names["Part I, Item 1"].start)
    assert text.startswith("Item 1. Legal Proceedings\n", names["Part II, Item 1"].start)
    assert found.doubted == []


@pytest.mark.parametrize("name", SUBMISSIONS)
def test_items_referred_to_exhibit_13_are_found_not_doubted(name: str) -> None:
    text = _read(name).text or ""
    found = locate(text, "10-K")
    assert found.doubted == []
    assert {"Item 1A", "Item 7", "Item 8"} <= {s.name for s in found.sections}


# --- Injection -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "ixbrl_10k.htm",
        "ixbrl_10q.htm",
        *SUBMISSIONS,
        "8k_ex99.txt",
        "form4.txt",
        "pem_10k_text.txt",
        "heading_in_spans.htm",
        "table_across_pages.htm",
        "entities_and_hidden.htm",
    ],
)
def test_clean_fixtures_are_not_flagged_as_injections(name: str) -> None:
    assert detect(_read(name).text or "") is None


def test_instructions_in_the_primary_documents_text_are_still_flagged() -> None:
    finding = detect(_read("injected_10k.txt").text or "")
    assert finding is not None and finding.kind == "ignore previous instructions"
    assert "Ignore all previous instructions" in finding.excerpt


# --- Bad inputs: one row each, with its reason ----------------------------------------------


@pytest.mark.parametrize(
    ("name", "form_types", "reason"),
    [
        (
            "bad_truncated.txt",
            ["*"],
            r"^a truncated EDGAR submission: the file ends inside document 1 \(10-K\)",
        ),
        ("bad_no_body.htm", ["*"], r"^an HTML file with no readable text"),
        (
            "bad_no_primary.txt",
            ["*"],
            r"^an EDGAR submission with no primary document: no <DOCUMENT> of type '10-K'",
        ),
        ("8k_ex99.txt", ["10-K*"], r"^form type '8-K' is not one this pipeline reads: PIPELINE_FORM_TYPES"),
        ("bad_entity_bomb.xml", ["*"], r"^an XML file that cannot be read: it declares entities in a DTD"),
        ("bad_entity_bomb.htm", ["*"], r"^an HTML file that cannot be read: it declares entities in a DTD"),
        ("bad_xxe.xml", ["*"], r"^an XML file that cannot be read: it declares entities in a DTD"),
        ("bad_xxe.htm", ["*"], r"^an HTML file that cannot be read: it declares entities in a DTD"),
    ],
)
def test_a_bad_input_is_one_file_with_its_reason(name: str, form_types: list[str], reason: str) -> None:
    loaded = load_bytes(name, _bytes(name), 0, Reading(form_types=tuple(form_types)))
    assert loaded.problem is not None and re.search(reason, loaded.problem), loaded.problem
    assert loaded.text is None and loaded.sha256 is None


def test_a_local_file_a_dtd_names_appears_nowhere(tmp_path: Path) -> None:
    secret = "xxe-canary-7f3a9c"
    target = tmp_path / "secret.txt"
    target.write_text(secret)
    hostname = Path("/etc/hostname").read_text().strip() if Path("/etc/hostname").exists() else ""
    cases = {
        "bad_xxe.xml": _bytes("bad_xxe.xml"),
        "bad_xxe.htm": _bytes("bad_xxe.htm"),
        "xxe_canary.xml": _bytes("bad_xxe.xml").replace(b"file:///etc/hostname", target.as_uri().encode()),
        "xxe_canary.htm": _bytes("bad_xxe.htm").replace(b"file:///etc/hostname", target.as_uri().encode()),
    }
    for name, data in cases.items():
        loaded = load_bytes(name, data)
        shown = repr(loaded)
        assert secret not in shown, name
        assert not hostname or len(hostname) < 4 or hostname not in shown.replace("hostname", ""), name
        assert loaded.problem is not None, name


def test_a_dtd_in_a_submissions_document_refuses_the_submission() -> None:
    data = _bytes("sec_header_10k.txt").replace(
        b"<html><head><title>hpi-ex13.htm",
        b'<!DOCTYPE html [<!ENTITY xxe SYSTEM "file:///etc/hostname">]>\n<html><head><title>hpi-ex13.htm',
    )
    loaded = load_bytes("sub.txt", data)
    assert loaded.problem is not None and "declares entities in a DTD" in loaded.problem
    assert "EX-13" in loaded.problem


def test_a_statement_footer_repeated_at_every_page_break_is_kept_once() -> None:
    from pipeline.ingest.filing import furniture

    footer = "The accompanying notes are an integral part of these statements."
    lines: list[tuple[str, int]] = []
    for page in range(1, 5):
        lines += [
            (f"Revenue | {page}", 0),
            (footer, 0),
            (str(page), 0),
            (furniture.PAGE_BREAK, 0),
            ("Acme Inc. | 10-K", 0),
        ]
    kept = [line for line, _ in furniture.drop(lines)]
    assert kept.count(footer) == 1 and "Acme Inc. | 10-K" not in kept and "2" not in kept
