"""A filing's own context, which every chunk prompt of the filing carries before its chunk (the
cached layout, issue 50): its metadata as the intake read it, its cover page and its table of
contents.

The same bytes for every chunk of one filing, whichever process builds them (the synchronous
path, a batch file, an escalation): derived only from the stored text and the document's
metadata columns, bounded in tokens counted with one fixed encoding (not the run's model's), so
that a provider's prompt cache serves it after the filing's first call. It is filing text and
goes to the model between delimiting tags like the chunk (`pipeline.llm.prompts.delimited`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import date

from pipeline.ingest import sections
from pipeline.ingest.filing.metadata import Metadata
from pipeline.llm import tokens
from pipeline.storage.models import Document

COVER_TOKENS = 192
"""The cover page's lines kept, at most (a 10-K's cover, checkboxes and all, runs to ~1,000)."""
CONTENTS_TOKENS = 128
"""The table of contents' lines kept, at most (a 10-K's 23 item headings, cut, take ~190)."""
HEADING_CHARS = 48
"""A heading line of the table of contents is cut to this."""
COUNTED_AS = "gpt-4o"
"""The model whose encoding (o200k_base) counts the context's tokens: fixed, so that workers
with other models build the same bytes."""
MEMO_FILINGS = 64
"""Contexts remembered per process (a document's chunks ask for theirs one after another)."""


@dataclass(frozen=True)
class FilingFacts:
    """What the intake read of the filing (the `documents` columns), None where it read nothing."""

    form_type: str | None = None
    company_name: str | None = None
    cik: str | None = None
    period_of_report: date | None = None
    fiscal_year: int | None = None

    @classmethod
    def of(cls, doc: Document) -> FilingFacts:
        return cls(doc.form_type, doc.company_name, doc.cik, doc.period_of_report, doc.fiscal_year)

    @classmethod
    def read(cls, meta: Metadata | None) -> FilingFacts:
        """What the intake read (the values submit stores in the document's columns)."""
        if meta is None:
            return cls()
        return cls(meta.form, meta.company, meta.cik, meta.period, meta.fiscal_year)

    def lines(self) -> list[str]:
        named = [
            ("Form", self.form_type),
            ("Company", self.company_name),
            ("CIK", self.cik),
            ("Period of report", self.period_of_report.isoformat() if self.period_of_report else None),
            ("Fiscal year", str(self.fiscal_year) if self.fiscal_year else None),
        ]
        return [f"{name}: {' '.join(value.split())}" for name, value in named if value]


def build(text: str, facts: FilingFacts, found: list[sections.Section] | None = None) -> str:
    """The context of the filing whose stored text is `text` (pure): its metadata, the text
    before its first item heading (the cover page, and often the table of contents) and the
    item headings found, each part within its token cap. Sections are found as the intake
    finds them (`sections.find_sections`; `found`: already found so); a filing without item
    headings has no contents."""
    count = tokens.counter_for(COUNTED_AS)
    if found is None:
        found = sections.find_sections(text, facts.form_type)
    found = [s for s in found if s.name != "Cover"]
    cover_end = found[0].start if found else len(text)
    parts = ["Metadata (from the filing's header or cover facts):", *facts.lines()] if facts.lines() else []
    cover = _within(_lines(text[:cover_end]), COVER_TOKENS, count)
    if cover:
        parts += ["Cover page (first lines):", *cover]
    headings = [_heading(text, s.start) for s in found]
    contents = _within([h for h in headings if h], CONTENTS_TOKENS, count)
    if contents:
        parts += ["Item headings:", *contents]
    return "\n".join(parts)


def warm_up() -> None:
    """Build the encoding the contexts are counted with, once per process: a worker does it at
    its start, before it takes a task, not on its first filing (under the first documents' clock,
    while every thread waits for it)."""
    tokens.counter_for(COUNTED_AS)


def _lines(text: str) -> list[str]:
    """Non-blank lines, each with its runs of whitespace made one space (grounding matches
    quotes the same way, so a quote copied from here is found in the filing)."""
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]


def _heading(text: str, start: int) -> str:
    end = text.find("\n", start)
    line = " ".join(text[start : end if end != -1 else len(text)].split())
    return line[:HEADING_CHARS].rstrip()


def _within(lines: list[str], cap_tokens: int, count: tokens.Counter) -> list[str]:
    """The first lines whose tokens (each line's, and a newline) stay within `cap_tokens`; a
    first line alone over it is cut to its share of characters."""
    kept: list[str] = []
    used = 0
    for line in lines:
        size = count(line) + 1
        if used + size > cap_tokens:
            if not kept:
                kept.append(line[: cap_tokens * 3])  # ~3 characters a token: under the cap
            break
        kept.append(line)
        used += size
    return kept


_memo: OrderedDict[tuple[object, ...], str] = OrderedDict()
_memo_lock = threading.Lock()


def context_of(doc: Document, text: str) -> str:
    """`build` for the document, remembered per content and metadata: a filing's chunks, asked
    one after another or side by side, find its sections once per process."""
    facts = FilingFacts.of(doc)
    if doc.sha256 is None:
        return build(text, facts)
    key = (doc.sha256, facts)
    with _memo_lock:
        found = _memo.get(key)
        if found is not None:
            _memo.move_to_end(key)
            return found
    context = build(text, facts)
    with _memo_lock:
        _memo[key] = context
        while len(_memo) > MEMO_FILINGS:
            _memo.popitem(last=False)
    return context
