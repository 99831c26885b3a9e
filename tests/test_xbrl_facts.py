"""The filing's own revenue fact, chosen by its context (pure): one trap a test, on markup of our
own written after the Inline XBRL 1.1 specification and the EDGAR Filer Manual."""

from __future__ import annotations

from datetime import date

import pytest
from lxml import html as lxml_html

from pipeline.ingest.filing import xbrl
from pipeline.ingest.filing.html import parser

CONTEXTS = """
<xbrli:context id="FY2024"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000999001</xbrli:identifier></xbrli:entity>
  <xbrli:period><xbrli:startDate>2024-01-01</xbrli:startDate><xbrli:endDate>2024-12-31</xbrli:endDate></xbrli:period></xbrli:context>
<xbrli:context id="FY2023"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000999001</xbrli:identifier></xbrli:entity>
  <xbrli:period><xbrli:startDate>2023-01-01</xbrli:startDate><xbrli:endDate>2023-12-31</xbrli:endDate></xbrli:period></xbrli:context>
<xbrli:context id="Q4_2024"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000999001</xbrli:identifier></xbrli:entity>
  <xbrli:period><xbrli:startDate>2024-10-01</xbrli:startDate><xbrli:endDate>2024-12-31</xbrli:endDate></xbrli:period></xbrli:context>
<xbrli:context id="I2024"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000999001</xbrli:identifier></xbrli:entity>
  <xbrli:period><xbrli:instant>2024-12-31</xbrli:instant></xbrli:period></xbrli:context>
<xbrli:context id="FY2024_Cloud"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000999001</xbrli:identifier>
  <xbrli:segment><xbrldi:explicitMember dimension="us-gaap:StatementBusinessSegmentsAxis">acme:CloudMember</xbrldi:explicitMember></xbrli:segment></xbrli:entity>
  <xbrli:period><xbrli:startDate>2024-01-01</xbrli:startDate><xbrli:endDate>2024-12-31</xbrli:endDate></xbrli:period></xbrli:context>
<xbrli:unit id="usd"><xbrli:measure>iso4217:USD</xbrli:measure></xbrli:unit>
<xbrli:unit id="eur"><xbrli:measure>iso4217:EUR</xbrli:measure></xbrli:unit>
"""


def _document(body: str) -> bytes:
    return f"""<?xml version="1.0" encoding="utf-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:ix="http://www.xbrl.org/2013/inlineXBRL"
 xmlns:xbrli="http://www.xbrl.org/2003/instance" xmlns:xbrldi="http://xbrl.org/2006/xbrldi"
 xmlns:dei="http://xbrl.sec.gov/dei/2024" xmlns:us-gaap="http://fasb.org/us-gaap/2024">
<body><div style="display:none"><ix:header><ix:hidden>
<ix:nonNumeric name="dei:DocumentType" contextRef="FY2024">10-K</ix:nonNumeric>
</ix:hidden><ix:resources>{CONTEXTS}</ix:resources></ix:header></div>
{body}
</body></html>""".encode()


def _revenue(body: str, context: str | None = "FY2024") -> xbrl.Revenue:
    root = lxml_html.document_fromstring(_document(body), parser=parser("utf-8"))
    return xbrl.revenue(root, context)


def _fact(concept: str, context: str, shown: str, *, unit: str = "usd", extra: str = "") -> str:
    return (
        f'<ix:nonFraction name="{concept}" contextRef="{context}" unitRef="{unit}" decimals="-6" '
        f'format="ixt:num-dot-decimal" {extra}>{shown}</ix:nonFraction>'
    )


def test_of_several_periods_the_documents_own_fiscal_year_is_taken() -> None:
    found = _revenue(
        "<table><tr><td>Revenues</td>"
        + "<td>" + _fact("us-gaap:Revenues", "FY2024", "12,345", extra='scale="6"') + "</td>"
        + "<td>" + _fact("us-gaap:Revenues", "FY2023", "11,000", extra='scale="6"') + "</td>"
        + "<td>" + _fact("us-gaap:Revenues", "Q4_2024", "3,300", extra='scale="6"') + "</td></tr></table>"
    )  # fmt: skip
    assert found == xbrl.Revenue(12_345e6, "us-gaap:Revenues", "FY2024", date(2024, 1, 1), date(2024, 12, 31))


def test_scale_and_sign_are_applied() -> None:
    found = _revenue(_fact("us-gaap:Revenues", "FY2024", "1,234.5", extra='scale="3" sign="-"'))
    assert found.value_usd == -1_234_500.0


def test_a_comma_decimal_format_and_a_dash_for_zero_are_read() -> None:
    comma = _fact("us-gaap:Revenues", "FY2024", "1.234,5", extra='scale="3"').replace(
        "num-dot-decimal", "num-comma-decimal"
    )
    assert _revenue(comma).value_usd == 1_234_500.0
    zero = _fact("us-gaap:Revenues", "FY2024", "—").replace("num-dot-decimal", "fixed-zero")
    assert _revenue(zero).value_usd == 0.0


def test_dimension_only_revenue_is_not_total_revenue() -> None:
    found = _revenue(_fact("us-gaap:Revenues", "FY2024_Cloud", "5,000", extra='scale="6"'))
    assert found.value_usd is None
    assert found.why is not None and "only segment facts" in found.why


def test_the_first_concept_of_the_list_wins_over_later_ones_and_banks_are_covered() -> None:
    asc606 = _fact(
        "us-gaap:RevenueFromContractWithCustomerExcludingAssessedTax", "FY2024", "900", extra='scale="6"'
    )
    total = _fact("us-gaap:Revenues", "FY2024", "1,000", extra='scale="6"')
    assert _revenue(asc606 + total).concept == "us-gaap:Revenues"
    bank = _fact("us-gaap:RevenuesNetOfInterestExpense", "FY2024", "82,296", extra='scale="6"')
    assert _revenue(bank).value_usd == 82_296e6


def test_a_concept_outside_the_list_is_named_not_taken() -> None:
    found = _revenue(_fact("acme:TotalNetRevenueAndOtherIncome", "FY2024", "7,000", extra='scale="6"'))
    assert found.value_usd is None
    assert found.why == "a revenue concept outside the list (acme:TotalNetRevenueAndOtherIncome)"


def test_a_fact_in_another_currency_is_not_taken() -> None:
    found = _revenue(_fact("us-gaap:Revenues", "FY2024", "7,000", unit="eur", extra='scale="6"'))
    assert found.value_usd is None and found.why == "no revenue fact in US dollars"


def test_only_other_periods_is_said() -> None:
    found = _revenue(_fact("us-gaap:Revenues", "FY2023", "11,000", extra='scale="6"'))
    assert found.why == "no duration fact for the current fiscal year (only other periods)"


def test_without_the_covers_context_the_latest_fiscal_year_is_the_documents() -> None:
    found = _revenue(_fact("us-gaap:Revenues", "FY2024", "5", extra='scale="9"'), context=None)
    assert found.value_usd == 5e9 and found.context == "FY2024"


def test_a_filing_with_no_xbrl_has_no_fact_and_says_so() -> None:
    root = lxml_html.document_fromstring(b"<html><body><p>Total revenue was $5 billion.</p></body></html>")
    assert xbrl.revenue(root, None) == xbrl.Revenue(why=xbrl.NO_XBRL)


@pytest.mark.parametrize(("shown", "value"), [("12,345", 12_345.0), ("0.5", 0.5), ("1 234", 1_234.0)])
def test_shown_numbers_are_read(shown: str, value: float) -> None:
    assert _revenue(_fact("us-gaap:Revenues", "FY2024", shown)).value_usd == value


@pytest.mark.parametrize(
    ("old", "new"),
    [("xbrldi", "xdi"), ("xbrli", "i"), ("us-gaap", "usgaap")],
    ids=["dimensions' prefix", "instance's prefix", "us-gaap's prefix"],
)
def test_namespaces_are_matched_whatever_prefix_the_filer_binds(old: str, new: str) -> None:
    """XBRL lets a filer bind any prefix: a segment's revenue under `xdi:explicitMember` is still
    a segment's, and `usgaap:Revenues` is us-gaap's Revenues."""
    body = _fact("us-gaap:Revenues", "FY2024_Cloud", "5,000", extra='scale="6"') + _fact(
        "us-gaap:Revenues", "FY2024", "12,345", extra='scale="6"'
    )
    document = (
        _document(body).decode().replace(f"{old}:", f"{new}:").replace(f"xmlns:{old}=", f"xmlns:{new}=")
    )
    root = lxml_html.document_fromstring(document.encode(), parser=parser("utf-8"))
    found = xbrl.revenue(root, "FY2024")
    assert (found.value_usd, found.concept) == (12_345e6, "us-gaap:Revenues")


@pytest.mark.parametrize(
    ("shown", "value"), [("three", 3.0), ("twenty-one", 21.0), ("no", 0.0), ("several", None)]
)
def test_numbers_in_words_are_read_as_numbers(shown: str, value: float | None) -> None:
    root = lxml_html.document_fromstring(
        _document(
            _fact("us-gaap:NumberOfReportableSegments", "FY2024", shown).replace(
                "num-dot-decimal", "ixt-sec:numwordsen"
            )
        ),
        parser=parser("utf-8"),
    )
    (fact,) = xbrl.facts(root).numeric
    assert fact.value == value


def test_a_cover_fact_continued_elsewhere_is_read_whole() -> None:
    """Inline XBRL 1.1 4.1.1: a nonNumeric fact's text goes on in the ix:continuation its
    continuedAt names, and that one's own continuedAt, in order."""
    from pipeline.ingest.filing import html

    body = (
        '<p><ix:nonNumeric name="dei:EntityRegistrantName" contextRef="FY2024" continuedAt="c1">Harrow &amp;</ix:nonNumeric></p>'
        '<p><ix:continuation id="c1" continuedAt="c2">Pike Instruments,</ix:continuation></p>'
        '<p><ix:continuation id="c2">Inc.</ix:continuation></p>'
    )
    converted = html.convert(_document(body))
    assert converted.dei["dei:entityregistrantname"] == "Harrow & Pike Instruments, Inc."
    assert converted.cover_context == "FY2024"
