"""Tests for the synthetic 10-K generator and the shipped example filings (pure, fast)."""

from __future__ import annotations

import importlib.util
import json
import re
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import pytest

from pipeline_dev.synth_filings import (
    FilingTruth,
    company_name,
    generate_filing,
    truth_json,
    write_filings,
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
REVENUE = re.compile(
    r"^Total revenue for fiscal (\d{4}) was \$([\d,]+(?:\.\d+)?) (million|billion), "
    r"(an increase|a decrease) of (\d+)% compared with fiscal (\d{4})\.$",
    re.MULTILINE,
)
ITEM_LINE = re.compile(r"^[ \t]*(item|part)\s+[0-9ivx]+[a-z]?\b", re.IGNORECASE | re.MULTILINE)


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(f"\n\n{start}\n\n") : text.index(f"\n\n{end}\n\n")]


def _paragraphs(section: str) -> list[str]:
    return [p for p in section.split("\n\n")[2:] if p.strip()]


def _check_truth(text: str, truth: FilingTruth) -> None:
    assert f"\nCOMPANY CONFORMED NAME: {truth.company}\n" in text
    assert re.search(rf"\nFor the fiscal year ended [A-Z][a-z]+ \d{{1,2}}, {truth.fiscal_year}\n", text)
    assert text.count("Total revenue for fiscal") == 1
    (match,) = REVENUE.findall(text)
    fy, amount, unit, _, _, prior = match
    assert (int(fy), int(prior)) == (truth.fiscal_year, truth.fiscal_year - 1)
    scale = 10**6 if unit == "million" else 10**9
    assert float(Decimal(amount.replace(",", "")) * scale) == truth.revenue_usd
    (row,) = re.findall(r"^Total revenues +([\d,]+) ", text, re.MULTILINE)
    assert int(row.replace(",", "")) * 1000 == truth.revenue_usd
    risks = _paragraphs(_section(text, "Item 1A. Risk Factors", "Item 1B. Unresolved Staff Comments"))
    assert 5 <= len(truth.risk_factor_titles) <= 9
    assert len(risks) == len(truth.risk_factor_titles)
    for paragraph, title in zip(risks, truth.risk_factor_titles, strict=True):
        assert paragraph.startswith(f"{title}. ")
        body = paragraph.replace("\n", " ")[len(title) + 2 :]
        assert 2 <= len(re.findall(r"[a-z]\.(?: |$)", body)) <= 4
        assert re.search(r"could adversely affect|\bmay\b|\brisk\b", body)
    assert truth.filename.endswith(f"-{truth.fiscal_year}-10k.txt")


def _load_generate_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("examples_generate", EXAMPLES / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_deterministic_and_truth_independent_of_size() -> None:
    text, truth = generate_filing(3, seed=5, target_bytes=30_000)
    assert generate_filing(3, seed=5, target_bytes=30_000) == (text, truth)
    bigger, same_truth = generate_filing(3, seed=5, target_bytes=90_000)
    assert same_truth == truth and bigger != text
    assert generate_filing(3, seed=6, target_bytes=30_000)[0] != text
    assert generate_filing(4, seed=5, target_bytes=30_000)[1].company != truth.company


@pytest.mark.parametrize("target", [20_000, 40_000, 80_000, 320_000, 1_000_000])
def test_target_size_within_ten_percent(target: int) -> None:
    for index in (0, 1, 17, 123):
        text, truth = generate_filing(index, seed=index % 3, target_bytes=target)
        assert abs(len(text.encode()) - target) <= target * 0.1, (index, len(text))
        _check_truth(text, truth)


@pytest.mark.parametrize("index", range(0, 400, 13))
def test_truth_matches_text(index: int) -> None:
    text, truth = generate_filing(index, seed=index, target_bytes=25_000 + 1000 * index)
    _check_truth(text, truth)


def test_format_ascii_wrapped_and_headed() -> None:
    text, _ = generate_filing(11, seed=2, target_bytes=150_000)
    assert text.isascii() and text.endswith("\n") and "\n\n\n" not in text
    assert text.startswith("UNITED STATES SECURITIES AND EXCHANGE COMMISSION\nWashington, D.C. 20549\n\n")
    assert max(len(line) for line in text.splitlines()) <= 100
    headings = [m.group(0).strip() for m in re.finditer(r"^(Item \d+[A-C]?\.|PART I+V?)", text, re.M)]
    order = ["PART I", "Item 1.", "Item 1A.", "Item 1B.", "Item 2.", "Item 3.", "PART II", "Item 7."]
    order += ["Item 7A.", "Item 8.", "PART III", "PART IV"]
    assert [h for h in headings if h in order] == order
    for match in ITEM_LINE.finditer(text):  # every "Item N"/"PART N" line is a standalone heading
        line = text[match.start() : text.index("\n", match.start())]
        assert re.fullmatch(r"Item \d+[A-C]?\. [A-Z[].*|PART (I|II|III|IV)", line), line
        assert text[match.start() - 2 : match.start()] == "\n\n"
    assert "SIGNATURES" in text and "Note 2. " in text  # large filings pad the notes too


def test_fiscal_years_ends_and_units_vary() -> None:
    texts = [generate_filing(i, target_bytes=12_000) for i in range(200)]
    years = {truth.fiscal_year for _, truth in texts}
    ends = {re.search(r"FISCAL YEAR END: (\d{4})", text).group(1) for text, _ in texts}  # type: ignore[union-attr]
    units = {m.group(3) for text, _ in texts for m in REVENUE.finditer(text)}
    changes = {m.group(4) for text, _ in texts for m in REVENUE.finditer(text)}
    suffixes = {truth.company.rsplit(" ", 1)[-1] for _, truth in texts}
    assert years == {2023, 2024, 2025, 2026}
    assert {"1231", "0630", "0930"} <= ends
    assert units == {"million", "billion"} and changes == {"an increase", "a decrease"}
    assert {"Inc.", "plc", "N.V."} <= suffixes


def test_unique_names_and_files() -> None:
    truths = [generate_filing(i, target_bytes=0)[1] for i in range(2000)]
    assert len({t.company for t in truths}) == 2000
    assert len({t.filename for t in truths}) == 2000
    names = {company_name(i, seed)[0] for seed in (0, 7) for i in range(20_001)}
    assert len(names) >= 20_001
    assert len({company_name(i, 7)[0] for i in range(20_001)}) == 20_001
    assert company_name(50_000)[0] != company_name(50_000 - 43_200)[0]


def test_write_filings_and_truth_json(tmp_path: Path) -> None:
    truths = write_filings(tmp_path, 3, seed=1, sizes=[21_000, 60_000])
    files = sorted(tmp_path.glob("*.txt"))
    assert [f.name for f in files] == sorted(t.filename for t in truths)
    sizes = {t.filename: (tmp_path / t.filename).stat().st_size for t in truths}
    assert abs(sizes[truths[0].filename] - 21_000) < 2_100
    assert abs(sizes[truths[1].filename] - 60_000) < 6_000
    assert abs(sizes[truths[2].filename] - 40_000) < 4_000  # default size
    for truth in truths:
        _check_truth((tmp_path / truth.filename).read_text(encoding="utf-8"), truth)
    doc = json.loads(truth_json(truths))
    assert [f["filename"] for f in doc["filings"]] == sorted(t.filename for t in truths)
    first = doc["filings"][0]
    assert list(first) == ["filename", "company", "fiscal_year", "revenue_usd", "risk_factor_titles"]
    assert isinstance(first["revenue_usd"], float) and isinstance(first["risk_factor_titles"], list)


def test_shipped_examples_match_regeneration(tmp_path: Path) -> None:
    script = _load_generate_script()
    assert script.main(["--out", str(tmp_path / "filings"), "--truth", str(tmp_path / "truth.json")]) == 0
    assert (EXAMPLES / "truth.json").read_bytes() == (tmp_path / "truth.json").read_bytes()
    shipped = sorted(p.name for p in (EXAMPLES / "filings").iterdir())
    assert shipped == sorted(p.name for p in (tmp_path / "filings").iterdir())
    for name in shipped:
        assert (EXAMPLES / "filings" / name).read_bytes() == (tmp_path / "filings" / name).read_bytes(), name
    assert sum(name.endswith((".htm", "-submission.txt")) for name in shipped) == 2
