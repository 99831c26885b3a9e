"""Fixture-like EDGAR files for the intake bench, made in code (no real filing is copied).

- `inline_xbrl_10k`: a synthetic 10-K (`synth_filings`) as inline-XBRL HTML shaped like EDGAR's:
  every run of text in a `<span>` with a long inline style, headings split across spans with
  `&#160;`, a table of contents, an `ix:header` of hidden facts and contexts, `dei:` facts on the
  cover, the income statement as a table with "$" and ")" in cells of their own, page numbers and
  running headers at page breaks.
- `submission`: a complete submission text file (`<SEC-DOCUMENT>` header) holding that 10-K, an
  EX-13, XBRL and JSON parts, and uuencoded GRAPHIC and ZIP parts repeated up to a size.
"""

from __future__ import annotations

import binascii
import html
import random
import re
from pathlib import Path

from pipeline_dev.synth_filings import FilingTruth, generate_filing

SPAN_STYLE = (
    "color:#000000;font-family:'Times New Roman',sans-serif;font-size:10pt;font-weight:400;line-height:120%"
)
HEAD_STYLE = SPAN_STYLE.replace("font-weight:400", "font-weight:700")
DIV_STYLE = "margin-bottom:6pt;margin-top:0;text-align:justify;text-indent:24.75pt"
PAGE_LINES = 60
"""Lines of the plain-text filing per HTML page (a page break, its number and a running header)."""
UU_LINE_BYTES = 45
"""Bytes per uuencoded line (the format's own: 61 characters a line)."""

RISK_INTRODUCTION = (
    "Investing in our securities involves a high degree of risk. You should carefully consider the "
    "risks and uncertainties described below, together with all of the other information in this "
    "Annual Report on Form 10-K, including our consolidated financial statements and related notes, "
    "before making an investment decision. The risks described below are not the only ones we face. "
    "Additional risks and uncertainties not presently known to us or that we currently deem immaterial "
    "may also materially and adversely affect our business, financial condition, results of operations "
    "and future prospects, and the trading price of our securities could decline as a result."
)
"""The opening paragraph of a real 10-K's Item 1A (the synthetic text lists the risks alone, and
its shortest Item 1A falls under `sections`' floor for a plausible one)."""
_ITEM = re.compile(r"^(Item \d{1,2}[A-C]?\.)\s+(.*)$")
_ROW = re.compile(r"^(\s*\S.*?)\s{2,}(\$?)\s*(\(?[\d,.]+\)?)\s+(\$?)\s*(\(?[\d,.]+\)?)\s*$")


def _span(text: str, style: str = SPAN_STYLE) -> str:
    return f'<span style="{style}">{html.escape(text, quote=False)}</span>'


def _heading(line: str) -> str:
    item = _ITEM.match(line)
    if item:  # "Item&#160;1A." and its title in spans of their own, as filers' tools write them
        number = html.escape(item.group(1)).replace(" ", "&#160;", 1)
        return (
            f'<div style="{DIV_STYLE}"><span style="{HEAD_STYLE}">{number}</span>'
            f"{_span(' ' + item.group(2), HEAD_STYLE)}</div>"
        )
    return f'<div style="{DIV_STYLE}">{_span(line, HEAD_STYLE)}</div>'


def _cell(text: str, align: str = "left") -> str:
    return f'<td style="padding:0 1pt;text-align:{align};vertical-align:bottom">{_span(text)}</td>'


def _table_row(line: str) -> str:
    row = _ROW.match(line)
    if not row:
        return f'<tr><td colspan="5">{_span(line.strip())}</td></tr>'
    label, sign1, first, sign2, second = row.groups()
    cells = [_cell(label.strip())]
    for sign, number in ((sign1, first), (sign2, second)):
        cells.append(_cell(sign, "right"))
        close = number.endswith(")")
        cells.append(_cell(number.rstrip(")"), "right"))
        cells.append(_cell(")" if close else ""))
    return "<tr>" + "".join(cells) + "</tr>"


def _contents(lines: list[str]) -> str:
    items = [m for m in map(_ITEM.match, lines) if m]
    rows = [
        f"<tr>{_cell(m.group(1))}{_cell(m.group(2))}{_cell(str(5 + 3 * i), 'right')}</tr>"
        for i, m in enumerate(items)
    ]
    return f'<table style="width:100%;border-collapse:collapse">{"".join(rows)}</table>'


def _ix_header(truth: FilingTruth) -> str:
    facts = "".join(
        f'<ix:nonNumeric name="{name}" contextRef="c-1">{html.escape(value)}</ix:nonNumeric>'
        for name, value in (
            ("dei:AmendmentFlag", "false"),
            ("dei:EntityCentralIndexKey", "0001422232"),
            ("dei:CurrentFiscalYearEndDate", "--12-31"),
        )
    )
    contexts = "".join(
        f'<xbrli:context id="c-{i}"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">'
        f"0001422232</xbrli:identifier></xbrli:entity><xbrli:period><xbrli:startDate>"
        f"{truth.fiscal_year}-01-01</xbrli:startDate><xbrli:endDate>{truth.fiscal_year}-12-31"
        f"</xbrli:endDate></xbrli:period></xbrli:context>"
        for i in range(1, 40)
    )
    return (
        f'<div style="display:none"><ix:header><ix:hidden>{facts}</ix:hidden><ix:references>'
        f'<link:schemaRef xlink:href="abc-{truth.fiscal_year}.xsd" xlink:type="simple"/>'
        f"</ix:references><ix:resources>{contexts}</ix:resources></ix:header></div>"
    )


def _cover(truth: FilingTruth) -> str:
    return (
        f'<div style="{DIV_STYLE}">{_span("FORM ")}<ix:nonNumeric name="dei:DocumentType" '
        f'contextRef="c-1">10-K</ix:nonNumeric></div><div style="{DIV_STYLE}">'
        f'<ix:nonNumeric name="dei:EntityRegistrantName" contextRef="c-1">{_span(truth.company)}'
        f'</ix:nonNumeric></div><div style="{DIV_STYLE}">{_span("Fiscal year ")}<ix:nonNumeric '
        f'name="dei:DocumentFiscalYearFocus" contextRef="c-1">{truth.fiscal_year}</ix:nonNumeric></div>'
    )


def inline_xbrl_10k(index: int, *, target_bytes: int = 60_000, seed: int = 0) -> tuple[bytes, FilingTruth]:
    """A synthetic 10-K of about `target_bytes` of plain text, as EDGAR-shaped inline XBRL."""
    text, truth = generate_filing(index, seed=seed, target_bytes=target_bytes)
    lines = text.splitlines()
    body: list[str] = [_ix_header(truth), _cover(truth), _contents(lines)]
    paragraph: list[str] = []
    table: list[str] = []
    page = 1

    def close_paragraph() -> None:
        if paragraph:
            body.append(f'<div style="{DIV_STYLE}">{_span(" ".join(paragraph))}</div>')
            paragraph.clear()

    for n, line in enumerate(lines):
        numeric = bool(_ROW.match(line)) or (line.startswith(" ") and line.strip()[:1].isdigit())
        if table and not numeric and line.strip():
            body.append(f'<table style="width:100%">{"".join(table)}</table>')
            table.clear()
        if not line.strip():
            close_paragraph()
        elif numeric or (line.startswith(" ") and not paragraph):
            close_paragraph()
            table.append(_table_row(line))
        elif _ITEM.match(line) or (line.isupper() and len(line) < 90) or (len(line) < 60 and not paragraph):
            close_paragraph()
            body.append(_heading(line))
            if line.startswith("Item 1A."):
                body.append(f'<div style="{DIV_STYLE}">{_span(RISK_INTRODUCTION)}</div>')
        else:
            paragraph.append(line.strip())
        if n and n % PAGE_LINES == 0 and not paragraph and not table:
            body.append(
                f'<div style="text-align:center">{_span(str(page))}</div>'
                '<hr style="page-break-after:always"/>'
                f'<div style="{DIV_STYLE}">{_span(f"{truth.company} | {truth.fiscal_year} Form 10-K")}</div>'
            )
            page += 1
    close_paragraph()
    if table:
        body.append(f'<table style="width:100%">{"".join(table)}</table>')
    document = (
        '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" '
        'xmlns:ix="http://www.xbrl.org/2013/inlineXBRL" xmlns:xbrli="http://www.xbrl.org/2003/instance" '
        'xmlns:dei="http://xbrl.sec.gov/dei/2023"><head><title>10-K</title><style type="text/css">'
        "body{font-family:serif}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )
    return document.encode("utf-8"), truth


def uuencoded(name: str, size_bytes: int, rng: random.Random) -> bytes:
    """A `begin 644 name` block of `size_bytes` random bytes, as EDGAR carries images and ZIPs."""
    payload = rng.randbytes(size_bytes)
    lines = [binascii.b2a_uu(payload[i : i + UU_LINE_BYTES]) for i in range(0, size_bytes, UU_LINE_BYTES)]
    return b"begin 644 " + name.encode() + b"\n" + b"".join(lines) + b"`\nend\n"


def _document(kind: str, sequence: int, filename: str, body: bytes, wrapper: str = "") -> bytes:
    opened, closed = (f"<{wrapper}>\n", f"</{wrapper}>\n") if wrapper else ("", "")
    return (
        (
            f"<DOCUMENT>\n<TYPE>{kind}\n<SEQUENCE>{sequence}\n<FILENAME>{filename}\n"
            f"<DESCRIPTION>{kind}\n<TEXT>\n{opened}"
        ).encode()
        + body
        + f"{closed}</TEXT>\n</DOCUMENT>\n".encode()
    )


def submission(path: Path, *, target_bytes: int, primary: bytes, truth: FilingTruth, seed: int = 0) -> int:
    """Write a complete submission of about `target_bytes` to `path`: header, the 10-K `primary`,
    an EX-13, XBRL and JSON parts, then uuencoded GRAPHIC and ZIP parts (1 MB each, one made and
    repeated) until the size is reached. Returns its size in bytes."""
    rng = random.Random(seed)
    header = (
        "<SEC-DOCUMENT>0001422232-27-000012.txt : 20270215\n<SEC-HEADER>0001422232-27-000012.hdr.sgml\n"
        "ACCESSION NUMBER:\t\t0001422232-27-000012\nCONFORMED SUBMISSION TYPE:\t10-K\n"
        f"PUBLIC DOCUMENT COUNT:\t\t99\nCONFORMED PERIOD OF REPORT:\t{truth.fiscal_year}1231\n"
        "FILED AS OF DATE:\t\t20270215\n\nFILER:\n\n\tCOMPANY DATA:\t\n"
        f"\t\tCOMPANY CONFORMED NAME:\t\t\t{truth.company.upper()}\n"
        "\t\tCENTRAL INDEX KEY:\t\t\t0001422232\n\t\tFISCAL YEAR END:\t\t\t1231\n"
        "</SEC-HEADER>\n"
    ).encode()
    exhibit = _exhibit_13(truth)
    xbrl = (
        b'<?xml version="1.0"?>\n<xbrli:xbrl>'
        + b"<us-gaap:Revenues>1</us-gaap:Revenues>" * 2_000
        + b"</xbrli:xbrl>\n"
    )
    parts = [
        _document("10-K", 1, "abc-20261231.htm", primary),
        _document("EX-13", 2, "ex13.htm", exhibit),
        _document("EX-101.INS", 3, "abc-20261231_htm.xml", xbrl, "XBRL"),
        _document("JSON", 4, "MetaLinks.json", b'{"instance": {"abc": {"dts": {}}}}\n' * 500, "JSON"),
    ]
    with path.open("wb") as out:
        out.write(header)
        for part in parts:
            out.write(part)
        written = len(header) + sum(map(len, parts))
        block = {kind: uuencoded(f"part.{kind.lower()}", 1024 * 1024, rng) for kind in ("jpg", "zip")}
        sequence = len(parts) + 1
        while written < target_bytes:
            kind = "jpg" if sequence % 3 else "zip"
            part = _document(
                "GRAPHIC" if kind == "jpg" else "ZIP", sequence, f"g{sequence}.{kind}", block[kind]
            )
            out.write(part)
            written += len(part)
            sequence += 1
        out.write(b"</SEC-DOCUMENT>\n")
    return written + len(b"</SEC-DOCUMENT>\n")


def _exhibit_13(truth: FilingTruth) -> bytes:
    """An EX-13 (the annual report to shareholders) of a few paragraphs."""
    said = (
        f"{truth.company} closed fiscal {truth.fiscal_year} with total revenues of "
        f"${truth.revenue_usd / 1e6:,.1f} million. This letter accompanies the annual report."
    )
    paragraphs = "".join(f'<div style="{DIV_STYLE}">{_span(said)}</div>' for _ in range(8))
    title = _heading("Annual Report to Shareholders")
    return f"<html><body>{title}{paragraphs}</body></html>\n".encode()
