"""Property-based tests (hypothesis) of what reads and shows model text, on arbitrary text:

- the lenient reader of model answers (`pipeline.llm.lenient.read`) on any string, and on
  valid answers cut anywhere, never raises: it returns a valid value or the validation error,
  and a cut answer keeps only items the answer had;
- the Markdown report (`render.escape`, `render.cell`, `render.markdown`) rendered by
  markdown-it as GitHub would (raw HTML on, linkify, tables) holds no element or attribute that
  fetches, links or runs: only formatting tags, and the same text;
- the HTML page's escaping (`html_parts.text`, `tag`, `table`) and the whole page
  (`html.render_page`) parse back to the text given, with no element or attribute from it.

Text is drawn from every Unicode character plus the fragments that make markup active
(brackets, `<`, `&`, backslashes, `//`, `www.`, `@`, reference definitions, entities, tags).
Bounded in time (`max_examples` per test below), no example database.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from pydantic import BaseModel

from pipeline.extraction.schemas import FilingExtraction
from pipeline.llm.lenient import read
from pipeline.reporting import html_parts
from pipeline.reporting.html import render_page
from pipeline.reporting.page_data import PageInput
from pipeline.reporting.render import DocumentRow, ReportInput, cell, escape, markdown

FAST = settings(max_examples=120, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=6, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

FRAGMENTS = [
    "[", "]", "![", "](", "[1]: ", "\n[1]: ", "[^1]", "<", ">", "</", "/>", "&", "&#", "&lt;", ";",
    "\\", "\\\\", "`", "```", "\n", "\n\n", "    ", "\t", "|", "*", "_", "~", "#", "-", "=", ":",
    "(", ")", "{", "}", '"', "'", " ", "!", "?", "/", "//", "http://", "https:", "ftp://",
    "mailto:", "www.", "@", ".com", ".example", ".", "x", "7", "javascript:", "data:", "vbscript:",
    "<img src=", "<script>", "<a href=", "<iframe", "<svg", "<style>", "@import", "url(",
    "srcset=", "<meta http-equiv=refresh content=", "<!--", "-->", "<?", "<![CDATA[", "]]>",
    "\u3002", "\uff0e", "\u200b", "\x00", "\r", "\ufeff", "attacker", "127.0.0.1",
]  # fmt: skip
model_text = st.lists(st.one_of(st.text(), st.sampled_from(FRAGMENTS)), max_size=40).map("".join)

MARKDOWN = MarkdownIt("gfm-like")
"""markdown-it as a Markdown viewer would render a report: raw HTML on, linkify, GFM tables."""
FORMATTING = {"p", "br", "em", "strong", "s", "code", "pre", "hr", "blockquote", "ul", "ol", "li"}
FORMATTING |= {f"h{level}" for level in range(1, 7)} | {"table", "thead", "tbody", "tr", "th", "td"}
INERT_ATTRIBUTES = {("ol", "start"), ("td", "style"), ("th", "style"), ("code", "class")}
"""A list's first number, a table column's alignment, a fenced block's language (as a class)."""
ALIGNMENT = re.compile(r"text-align:(left|right|center)")


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text, of an HTML fragment."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.data: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.data.append(data)

    def unknown_decl(self, data: str) -> None:
        raise AssertionError(f"a declaration in the output: {data!r}")


def parsed(fragment: str) -> Elements:
    found = Elements()
    found.feed(fragment)
    found.close()
    return found


def assert_inert_markdown(source: str) -> None:
    """`source` rendered as a viewer would holds only formatting, with inert attributes."""
    rendered = MARKDOWN.render(source)
    for tag, attrs in parsed(rendered).tags:
        assert tag in FORMATTING, (tag, rendered)
        for name, value in attrs:
            assert (tag, name) in INERT_ATTRIBUTES, (tag, name, value, rendered)
            if name == "style":
                assert ALIGNMENT.fullmatch(value or ""), (tag, value)
            if name == "class":
                assert (value or "").startswith("language-"), (tag, value)


def shown_text(source: str) -> str:
    """What a reader sees of `source` rendered, whitespace collapsed."""
    return " ".join("".join(parsed(MARKDOWN.render(source)).data).split())


@FAST
@given(model_text)
def test_escaped_model_text_renders_with_nothing_that_fetches_links_or_runs(text: str) -> None:
    assert_inert_markdown(escape(text))
    assert_inert_markdown(f"| a |\n| --- |\n| {cell(text)} |\n")


@FAST
@given(model_text.map(lambda t: re.sub(r"[*_`~#=+>|\-\s]+", " ", t).lstrip(" 0123456789")))
def test_escaped_text_reads_as_written(text: str) -> None:
    """One line without the characters of formatting (emphasis, headings, lists, quotes, code,
    tables) shows as itself."""
    shown = shown_text(escape(text))
    assert shown == " ".join(text.replace("\x00", "\ufffd").split()), (text, escape(text))


@FAST
@given(st.lists(model_text, min_size=9, max_size=9))
def test_a_report_of_hostile_answers_renders_with_nothing_active(texts: list[str]) -> None:
    answer, query, name, company, risk, path, error, excerpt, model = texts
    documents = [
        DocumentRow(
            path, "extracted", company=company, fiscal_year=2024, revenue_usd=1e9, risk_titles=[risk]
        ),
        DocumentRow(path, "failed", error=error),
        DocumentRow(path, "extracted", company=company, injection_excerpt=excerpt),
    ]
    totals = {"documents": {"extracted": 2, "failed": 1}, "llm_calls": 3, "tokens": 10}
    report = ReportInput("r" * 32, name, query, model, True, answer, 1, documents, totals, failure=error)
    assert_inert_markdown(markdown(report))


@FAST
@given(model_text)
def test_the_html_escaper_gives_back_the_text_and_no_element(text: str) -> None:
    page = html_parts.tag("div", text) + html_parts.table(["h"], [[text]])
    page += f'<p title="{html_parts.text(text)}"></p>'
    found = parsed(page)
    assert [tag for tag, _ in found.tags] == ["div", "table", "thead", "tr", "th", "tbody", "tr", "td", "p"]
    assert found.tags[-1][1] == [("title", text)]
    assert "".join(found.data) == f"{text}h{text}"


@SLOW
@pytest.mark.filterwarnings("ignore:Glyph")  # matplotlib has no glyph for some characters: not ours
@given(st.lists(model_text, min_size=6, max_size=6))
def test_a_page_of_hostile_answers_has_no_element_or_attribute_from_them(texts: list[str]) -> None:
    marker = "zq-hostile"  # in every hostile string: an element or attribute holding it came from data
    answer, query, name, company, path, error = (f"{marker}{t}" for t in texts)
    documents = [
        {
            "path": path,
            "status": "extracted",
            "company": company,
            "revenue_usd": 2e9,
            "risk_titles": [company],
        },
        {"path": f"{path}2", "status": "extracted", "company": f"{company}2", "revenue_usd": 3e9},
        {"path": path, "status": "failed", "error": error, "injection_excerpt": answer},
    ]
    report = {
        "run_id": "r" * 32, "name": name, "query": query, "model": "sim-1", "simulated": True,
        "answer": answer, "failure": None, "documents": documents,
        "totals": {"documents": {"extracted": 2, "failed": 1}, "grounding": {}},
    }  # fmt: skip
    page = render_page(
        PageInput(
            report=report,
            status="completed",
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            finished_at=None,
            calls=[],
            by_stage=[],
            by_model=[],
            slowest=[],
        )
    )
    found = parsed(page)
    for tag, attrs in found.tags:
        assert marker not in tag
        for key, value in attrs:
            assert marker not in key and marker not in (value or ""), (tag, key, value)
            assert key not in ("src", "srcset", "action", "formaction", "background", "poster", "data")
            assert key not in ("href", "xlink:href") or (value or "").startswith("#"), (tag, key, value)
            assert not key.startswith("on"), (tag, key)
    assert answer in "".join(found.data)  # the parser has read the references: the text as given


ANSWER = {
    "company": "Amber Holdings Inc.",
    "fiscal_year": 2025,
    "revenue_usd": 1.25e9,
    "revenue_quote": "Total revenue was $1.25 billion.",
    "risk_factors": [{"title": f"Risk {i}", "quote": f"We may lose customer {i}."} for i in range(6)],
}


any_text = st.lists(st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr))).map("".join)
"""Any string, lone surrogates too (hypothesis leaves them out of `st.text()`): the SDK hands one
over where a provider's JSON body held `"\\ud800"`."""


@FAST
@given(any_text, st.sampled_from(["stop", "length", "content_filter"]), st.sampled_from([5, None]))
def test_the_lenient_reader_never_raises_on_any_text(
    content: str, finish_reason: str, max_dropped: int | None
) -> None:
    _assert_read(content, finish_reason, max_dropped)


@FAST
@given(
    st.lists(st.one_of(any_text, st.sampled_from(['{"', '":', '",', "[", "]", "{", "}", "null", "1e999"])))
)
def test_the_lenient_reader_never_raises_on_json_like_text(parts: list[str]) -> None:
    _assert_read("".join(parts), "length", None)
    _assert_read("".join(parts), "stop", 5)


@FAST
@given(st.integers(min_value=0, max_value=len(json.dumps(ANSWER))), st.booleans())
def test_an_answer_cut_anywhere_keeps_only_its_own_complete_items(cut: int, pretty: bool) -> None:
    whole = json.dumps(ANSWER, indent=2 if pretty else None)
    reading = _assert_read(whole[: cut * len(whole) // len(json.dumps(ANSWER))], "length", None)
    if reading is not None:
        kept = reading.model_dump()["risk_factors"]
        assert kept == ANSWER["risk_factors"][: len(kept)], kept


def _assert_read(content: str, finish_reason: str, max_dropped: int | None) -> BaseModel | None:
    try:
        reading = read(content, FilingExtraction, finish_reason, max_dropped)
    except Exception as exc:  # the property: nothing raises out of the reader
        pytest.fail(f"read raised {type(exc).__name__}: {exc} on {content!r}")
    if reading.value is None:
        assert reading.error is not None, content
        return None
    assert isinstance(reading.value, FilingExtraction)
    FilingExtraction.model_validate(reading.value.model_dump())  # a valid value, not a half-built one
    return reading.value


def test_a_lone_surrogate_in_an_answer_is_read_not_raised() -> None:
    """As the SDK hands over an answer whose JSON body held `"\\ud800"` (found by the fuzzing)."""
    answer: dict[str, Any] = {**ANSWER, "company": "Amber \ud800 Inc."}
    reading = read(json.dumps(answer, ensure_ascii=False), FilingExtraction)
    assert reading.value is not None and reading.value.company == "Amber \ufffd Inc."
    assert reading.notes == ["lone surrogates read as U+FFFD"]
