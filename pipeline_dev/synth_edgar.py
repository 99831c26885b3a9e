"""A synthetic filing dressed as EDGAR serves it: an inline-XBRL HTML primary document, and a
complete submission text file around it (dev tool; the shipped EDGAR examples and tests).

The text and the truth are `synth_filings`' (so `pipeline eval` scores these as it scores the
plain-text examples); the markup follows the EDGAR Filer Manual and Inline XBRL 1.1 as real 10-Ks
use them: a hidden `ix:header` with the cover's `dei:` facts, inline CSS on every element, headings
of nested spans, statements as tables with "$" in a cell of its own, a page break every
PAGE_BLOCKS blocks with the page's number and a running header, and, in the submission, the
parts EDGAR adds: a uuencoded image, an XBRL schema, EDGAR's R page, a certification exhibit.
"""

from __future__ import annotations

import binascii
import html
import random
import re
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from pipeline_dev.synth_filings import FilingTruth, generate_filing

PAGE_BLOCKS = 40
SHORT_LINE = 80
"""A paragraph with a line this short before its last is lines of their own (the cover's)."""
_STYLE = "font-family:'Times New Roman',serif;font-size:10pt;color:#000000;line-height:120%"
_CELL = "padding:2px 1pt;vertical-align:bottom;background-color:#cceeff"
_ROW = re.compile(r"^(\s*)(\S.*?)(?:\s{2,}(.*))?$")
_AMOUNT = re.compile(r"\$?\s*\(?[\d,]+(?:\.\d+)?\)?")
_HEADING = re.compile(r"^(?:PART [IV]+|Item \d{1,2}[A-C]?\.|Note \d+\.|[A-Z][A-Z ,&'()-]{8,})")
_FISCAL_END = re.compile(r"fiscal year ended ([A-Z][a-z]+ \d{1,2}, \d{4})")


def inline_xbrl(text: str, truth: FilingTruth, cik: str) -> str:
    """`text` (a synthetic 10-K) as an inline-XBRL HTML document."""
    period = _period_end(text, truth)
    start = period - timedelta(days=364)  # the fiscal year's first day
    blocks = [_block(lines, truth) for lines in _paragraphs(text)]
    body: list[str] = []
    header = f"{html.escape(truth.company)} | {truth.fiscal_year} Form 10-K"
    for i, block in enumerate(blocks):
        if i and i % PAGE_BLOCKS == 0:
            page = i // PAGE_BLOCKS
            body.append(
                f'<div style="text-align:center;{_STYLE}"><span style="{_STYLE}">{page}</span></div>'
                '<hr style="page-break-after:always"/>'
                f'<div style="{_STYLE}"><span style="{_STYLE};font-size:8pt">{header}</span></div>'
            )
        body.append(block)
    facts = {
        "dei:DocumentType": "10-K",
        "dei:EntityRegistrantName": html.escape(truth.company),
        "dei:EntityCentralIndexKey": cik,
        "dei:DocumentPeriodEndDate": period.strftime("%B %d, %Y").replace(" 0", " "),
        "dei:DocumentFiscalYearFocus": str(truth.fiscal_year),
        "dei:AmendmentFlag": "false",
    }
    hidden = "".join(
        f'<ix:nonNumeric name="{name}" contextRef="FY">{value}</ix:nonNumeric>'
        for name, value in facts.items()
    )
    context = (
        f'<xbrli:context id="FY"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">{cik}'
        f"</xbrli:identifier></xbrli:entity><xbrli:period><xbrli:startDate>{start:%Y-%m-%d}</xbrli:startDate>"
        f"<xbrli:endDate>{period:%Y-%m-%d}</xbrli:endDate></xbrli:period>"
        '</xbrli:context><xbrli:unit id="usd"><xbrli:measure>iso4217:USD</xbrli:measure></xbrli:unit>'
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        "<!-- A synthetic filing (pipeline_dev/synth_edgar.py), not a real one. -->\n"
        '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:ix="http://www.xbrl.org/2013/inlineXBRL" '
        'xmlns:ixt="http://www.xbrl.org/inlineXBRL/transformation/2020-02-12" xmlns:xbrli="http://www.xbrl.org/2003/instance" xmlns:dei="http://xbrl.sec.gov/dei/2024" '
        'xmlns:us-gaap="http://fasb.org/us-gaap/2024" xmlns:iso4217="http://www.xbrl.org/2003/iso4217">\n'
        f"<head><title>{truth.filename}</title></head>\n<body>\n"
        f'<div style="display:none"><ix:header><ix:hidden>{hidden}</ix:hidden>'
        f"<ix:resources>{context}</ix:resources></ix:header></div>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def submission(document: str, truth: FilingTruth, cik: str, *, seed: int = 0) -> str:
    """`document` (the primary document's HTML) in a complete submission text file, with the
    parts a real one carries besides it."""
    rng = random.Random(seed)
    period = _period_end(document, truth)
    accession = f"{cik[-10:]}-{truth.fiscal_year % 100:02d}-{rng.randint(1, 999_999):06d}"
    filed = f"{period.year + (period.month > 9)}{(period.month + 2) % 12 + 1:02d}15"
    name = re.sub(r"[^A-Za-z0-9 &]", "", truth.company).upper()
    stem = truth.filename.rsplit(".", 1)[0]
    parts = [
        ("10-K", 1, f"{stem}.htm", "10-K", f"<XBRL>\n{document}</XBRL>\n"),
        ("EX-31.1", 2, f"{stem}-ex311.htm", "CERTIFICATION", _certification(truth)),
        ("GRAPHIC", 3, "logo.jpg", "", _uuencoded("logo.jpg", rng.randbytes(6_000))),
        ("EX-101.SCH", 4, f"{stem}.xsd", "XBRL TAXONOMY EXTENSION SCHEMA", _schema(stem)),
        ("XML", 5, "R1.htm", "IDEA: XBRL DOCUMENT", "<XML>\n<html><body><table><tr><td>Cover</td></tr></table></body></html>\n</XML>\n"),
        ("ZIP", 6, "Financial_Report.xlsx", "IDEA: XBRL DOCUMENT", _uuencoded("Financial_Report.xlsx", rng.randbytes(3_000))),
    ]  # fmt: skip
    header = (
        f"<SEC-DOCUMENT>{accession}.txt : {filed}\n<SEC-HEADER>{accession}.hdr.sgml : {filed}\n"
        f"ACCESSION NUMBER:\t\t{accession}\nCONFORMED SUBMISSION TYPE:\t10-K\n"
        f"PUBLIC DOCUMENT COUNT:\t\t{len(parts)}\nCONFORMED PERIOD OF REPORT:\t{period:%Y%m%d}\n"
        f"FILED AS OF DATE:\t\t{filed}\n\nFILER:\n\n\tCOMPANY DATA:\t\n\t\tCOMPANY CONFORMED NAME:\t\t\t{name}\n"
        f"\t\tCENTRAL INDEX KEY:\t\t\t{cik}\n\t\tFISCAL YEAR END:\t\t\t{period:%m%d}\n</SEC-HEADER>\n"
    )
    documents = "".join(
        f"<DOCUMENT>\n<TYPE>{kind}\n<SEQUENCE>{sequence}\n<FILENAME>{filename}\n"
        + (f"<DESCRIPTION>{description}\n" if description else "")
        + f"<TEXT>\n{body}</TEXT>\n</DOCUMENT>\n"
        for kind, sequence, filename, description, body in parts
    )
    return header + documents + "</SEC-DOCUMENT>\n"


def _period_end(text: str, truth: FilingTruth) -> datetime:
    found = _FISCAL_END.search(text)
    return datetime.strptime(found.group(1), "%B %d, %Y") if found else datetime(truth.fiscal_year, 12, 31)


def _paragraphs(text: str) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return [block for block in blocks if block]


def _block(lines: list[str], truth: FilingTruth) -> str:
    if len(lines) > 2 and sum("  " in line.strip() for line in lines) > len(lines) // 2:
        return _table(lines, truth)
    if any(len(line) < SHORT_LINE for line in lines[:-1]):  # the cover's lines, not wrapped prose
        return "\n".join(_block([line], truth) for line in lines)
    text = " ".join(line.strip() for line in lines)
    if len(lines) == 1 and _HEADING.match(text):
        words = text.split(" ", 1)
        spans = "".join(
            f'<span style="{_STYLE};font-weight:700">{html.escape(w)}&#160;</span>' for w in words
        )
        return f'<div style="margin-top:12pt;{_STYLE}">{spans.removesuffix("&#160;</span>")}</span></div>'
    escaped = html.escape(text).replace("'", "&#8217;").replace(" - ", " &#8212; ")
    return (
        f'<div style="margin-top:6pt;text-indent:24pt;{_STYLE}"><span style="{_STYLE}">{escaped}</span></div>'
    )


def _table(lines: list[str], truth: FilingTruth) -> str:
    rows = []
    for line in lines:
        label, _, rest = line.strip().partition("  ")
        cells = [label] + [c for c in re.split(r"\s{2,}", rest.strip()) if c]
        tds = []
        for i, cell in enumerate(cells):
            if i and cell.startswith("$"):
                tds.append(f'<td style="{_CELL}"><span style="{_STYLE}">$</span></td>')
                cell = cell[1:].strip()
            value = html.escape(cell)
            if i == 1 and label.strip().lower() == "total revenues" and _AMOUNT.fullmatch(cell):
                value = (
                    '<ix:nonFraction name="us-gaap:Revenues" contextRef="FY" unitRef="usd" decimals="-3" '
                    f'scale="3" format="ixt:num-dot-decimal">{value}</ix:nonFraction>'
                )
            tds.append(f'<td style="{_CELL}"><span style="{_STYLE}">{value}</span></td>')
        rows.append(f"<tr>{''.join(tds)}</tr>")
    return f'<table style="border-collapse:collapse;width:100%">{"".join(rows)}</table>'


def _certification(truth: FilingTruth) -> str:
    return (
        f"<html><body><p>CERTIFICATION</p><p>I have reviewed this annual report on Form 10-K of "
        f"{html.escape(truth.company)}.</p></body></html>\n"
    )


def _schema(stem: str) -> str:
    return (
        '<XBRL>\n<?xml version="1.0" encoding="utf-8"?>\n<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" '
        f'targetNamespace="http://example.com/{stem}"/>\n</XBRL>\n'
    )


def _uuencoded(name: str, data: bytes) -> str:
    lines = [binascii.b2a_uu(data[i : i + 45]).decode().rstrip("\n") for i in range(0, len(data), 45)]
    return f"begin 644 {name}\n" + "\n".join(lines) + "\n`\nend\n"


def write_example(directory: Path, index: int, kind: str, *, seed: int, target_bytes: int) -> FilingTruth:
    """Write synthetic filing `index` as EDGAR serves it, `kind` "htm" (the inline-XBRL primary
    document) or "submission" (the complete submission text file), and return its truth (with
    the file's name)."""
    text, truth = generate_filing(index, seed=seed, target_bytes=target_bytes)
    stated = re.search(r"CENTRAL INDEX KEY:\s*(\d+)", text)
    cik = stated.group(1) if stated else f"{1_900_000 + index * 7919:010d}"
    stem = truth.filename.removesuffix(".txt")
    document = inline_xbrl(text, truth, cik)
    if kind == "htm":
        name, content = f"{stem}.htm", document
    else:
        name, content = f"{stem}-submission.txt", submission(document, truth, cik, seed=seed + index)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(content, encoding="utf-8", newline="\n")
    return replace(truth, filename=name)
