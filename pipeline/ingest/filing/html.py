"""An HTML filing document as the text a reader sees (pure): what the model is sent and what
its quotes are checked against.

lxml parses (libxml2's HTML parser: forgiving of EDGAR's old markup, entities decoded, no
network, no DTD, no external entity), and one walk over the tree writes lines:

- nothing from `<head>`, `<style>`, `<script>`, the inline-XBRL `<ix:header>` (hidden facts,
  contexts, units) or any element hidden by `display:none`;
- block elements (paragraphs, divisions, headings, list items, breaks) end a line, so an
  "Item 1A." heading starts one; inline elements (`<span>`, `<font>`, `<ix:nonNumeric>`) do not,
  so a sentence crossing them stays whole;
- a table row is one line, its non-empty cells in order, joined by `CELL_SEPARATOR`; a "$" cell
  is joined to the number after it and a ")" or "%" cell to the one before, as on the page;
- page numbers and running headers or footers next to a page break are dropped (`furniture`).

Each line remembers the byte in the source where its element starts, so a quote found in the
text can be shown in the original file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from lxml import etree
from lxml import html as lxml_html

from pipeline.ingest.filing import furniture, xbrl

CELL_SEPARATOR = " | "
TOO_DEEP = (
    "its elements nest deeper than 256 levels, the parser's bound (no filing comes close): "
    "the rest of the file cannot be read"
)
_INTERNAL_SUBSET = re.compile(rb"<!DOCTYPE[^>\[]{0,200}\[.*?\]\s*>", re.IGNORECASE | re.DOTALL)
"""A DOCTYPE's internal subset (entity declarations: an entity bomb, a local file named):
blanked before parsing, so none of it is read or shown (HTML expands no such entity anyway)."""

_SKIP = frozenset({"head", "style", "script", "noscript", "template", "title", "ix:header", "object", "svg"})
_BLOCK = frozenset(
    {
        "p", "div", "br", "table", "li", "ul", "ol", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5",
        "h6", "hr", "section", "article", "center", "pre", "blockquote", "caption", "body", "header",
        "footer", "address", "form", "fieldset", "main", "nav", "aside", "figure", "figcaption",
    }
)  # fmt: skip
_CELL = frozenset({"td", "th"})
_ANCHORED = tuple(_BLOCK | {"tr"})
"""Elements whose place in the source a line records."""
_HIDDEN = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_PAGE_BREAK = re.compile(r"(?:page-)?break-(before|after)\s*:\s*(?:always|page)", re.IGNORECASE)
_SPACES = re.compile(r"[ \t\r\n\f\v\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))
_JOIN_NEXT = frozenset({"$", "US$", "€", "£", "(", "($", "$("})
_JOIN_PREVIOUS = re.compile(r"^[)%]+[)%,;.]*$|^\)?%$")


@dataclass
class Converted:
    text: str
    offsets: list[tuple[int, int]] = field(default_factory=list)
    """(offset in `text`, byte in the source) at the start of each line."""
    dei: dict[str, str] = field(default_factory=dict)
    """Inline-XBRL `dei:` facts, lower-case concept name to the text shown."""
    inline_xbrl: bool = False
    problem: str | None = None
    """Why the document cannot be read whole (its nesting is deeper than the parser's bound)."""
    facts: xbrl.Facts = field(default_factory=xbrl.Facts)
    """Its inline-XBRL contexts, units and numeric facts (none: not inline XBRL)."""
    cover_context: str | None = None
    """The context of its dei: cover facts: the document's own period."""


def parser(encoding: str) -> lxml_html.HTMLParser:
    """libxml2's HTML parser as the intake uses it: no network, comments and processing
    instructions dropped. Its HTML mode reads no DTD and expands no entity but HTML's own."""
    return lxml_html.HTMLParser(
        encoding=encoding,
        recover=True,
        no_network=True,
        remove_comments=True,
        remove_pis=True,
        remove_blank_text=False,
        collect_ids=False,
    )


def convert(data: bytes, *, base: int = 0) -> Converted:
    """The readable text of an HTML document's bytes; `base` is where they start in their file."""
    encoding = _encoding(data)
    data = _INTERNAL_SUBSET.sub(lambda m: b" " * len(m.group(0)), data, count=1)
    reader = parser(encoding)
    try:
        root = lxml_html.document_fromstring(data, parser=reader)
    except (etree.ParserError, ValueError):  # no element at all ("Document is empty")
        return Converted("")
    if any("Excessive depth" in str(error.message) for error in reader.error_log):
        return Converted("", problem=TOO_DEEP)
    bindings = xbrl.prefixes(root)  # read once: each look walks the whole tree
    ix = [p for p, uri in bindings.items() if uri == xbrl.INLINE] or ["ix"]
    dei, cover = _dei_facts(root, ix)
    lines = list(_Walk(root, data, base).lines(root))
    kept = furniture.drop(lines)
    text, offsets = _join(kept)
    inline = bool(dei) or _has_ix(root, ix)
    found = xbrl.facts(root, bindings) if inline else xbrl.Facts()
    return Converted(text, offsets, dei, inline_xbrl=inline, facts=found, cover_context=cover)


def _encoding(data: bytes) -> str:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "cp1252"  # EDGAR's older HTML is Latin-1/Windows-1252
    return "utf-8"


def _has_ix(root: etree._Element, ix: list[str]) -> bool:
    """Whether the document holds inline XBRL (`ix`: the prefixes bound to its namespace)."""
    names = [f"{p}:{local}" for p in ix for local in ("nonfraction", "nonnumeric", "header")]
    return next(root.iter(*names), None) is not None


def _dei_facts(root: etree._Element, ix: list[str]) -> tuple[dict[str, str], str | None]:
    """The `dei:` cover facts (lower-case name -> text shown, continuations joined), and the
    context they are stated in: the document's own period (`xbrl.revenue` takes its year)."""
    facts: dict[str, str] = {}
    cover: str | None = None
    continuations: dict[str, etree._Element] | None = None
    for element in root.iter(*(f"{p}:nonnumeric" for p in ix)):
        name = (element.get("name") or "").lower()
        if not name.startswith("dei:") or name in facts:
            continue
        text = _shown(element)
        if element.get("continuedat"):
            if continuations is None:
                continuations = {c.get("id", ""): c for c in root.iter(*(f"{p}:continuation" for p in ix))}
            text = " ".join([text, *_continued(element, continuations)])
        facts[name] = " ".join(text.split())
        if name in ("dei:documenttype", "dei:documentperiodenddate") and cover is None:
            cover = element.get("contextref")
    return facts, cover


def _continued(element: etree._Element, continuations: dict[str, etree._Element]) -> list[str]:
    """The texts of the `ix:continuation` chain a fact's `continuedAt` starts (Inline XBRL 1.1
    section 4.1.1), each once."""
    texts: list[str] = []
    seen: set[str] = set()
    at = element.get("continuedat")
    while at and at not in seen and at in continuations:
        seen.add(at)
        texts.append(_shown(continuations[at]))
        at = continuations[at].get("continuedat")
    return texts


def _shown(element: etree._Element) -> str:
    return "".join(str(piece) for piece in element.itertext())


class _Walk:
    """One pass over the tree: lines of text, each with the source byte where it starts."""

    def __init__(self, root: etree._Element, data: bytes, base: int) -> None:
        self.root, self.data, self.base = root, data, base
        self.line_starts: list[int] | None = None
        self.tags_on_line: dict[int, dict[str, list[int]]] = {}
        self.ordinals: dict[etree._Element, int] | None = None

    def lines(self, root: etree._Element) -> Iterator[tuple[str, int]]:
        """(line, source byte) in document order; furniture.PAGE_BREAK marks a page break."""
        words: list[str] = []
        line_at = self.base
        row: list[str] | None = None
        cell: list[str] | None = None
        walker = etree.iterwalk(root, events=("start", "end"))
        skipped: set[etree._Element] = set()
        for event, element in walker:
            tag = element.tag if isinstance(element.tag, str) else ""
            if event == "start":
                if tag in _SKIP or _hidden(element):
                    skipped.add(element)
                    walker.skip_subtree()
                    continue
                if _breaks(element, "before"):
                    yield from self._flush(words, line_at)
                    yield furniture.PAGE_BREAK, line_at
                if tag == "tr":
                    yield from self._flush(words, line_at)
                    row, line_at = [], self._where(element)
                elif tag in _CELL and row is not None:
                    cell = []
                elif tag in _BLOCK and cell is None:
                    yield from self._flush(words, line_at)
                    line_at = self._where(element)
                if element.text:
                    (cell if cell is not None else words).append(element.text)
                continue
            if element in skipped:
                skipped.discard(element)
            elif tag in _CELL and row is not None and cell is not None:
                row.append(_clean("".join(cell)))
                cell = None
            elif tag == "tr" and row is not None:
                if line := _row_line(row):
                    yield line, line_at
                row = None
            elif tag in _BLOCK and cell is None:
                yield from self._flush(words, line_at)
                if tag == "hr" or _breaks(element, "after"):
                    yield furniture.PAGE_BREAK, line_at
                line_at = self._where(element)
            elif tag in _BLOCK and cell is not None:
                cell.append(" ")
            if element.tail:
                (cell if cell is not None else words).append(element.tail)
        yield from self._flush(words, line_at)

    def _flush(self, words: list[str], at: int) -> Iterator[tuple[str, int]]:
        if words:
            line = _clean("".join(words))
            words.clear()
            if line:
                yield line, at

    def _where(self, element: etree._Element) -> int:
        """The source byte where `element`'s start tag lies: its line (libxml2 counts them), then
        the n-th `<tag` of that line (a long line holds hundreds), n counted over every element of
        the tree (hidden ones too) once, at the first call."""
        if self.ordinals is None:
            self.ordinals = {}
            counts: dict[tuple[int, str], int] = {}
            for each in self.root.iter(*_ANCHORED):
                key = (_line_of(each), str(each.tag))
                self.ordinals[each] = counts.get(key, 0)
                counts[key] = self.ordinals[each] + 1
            self.line_starts = [0, *(m.end() for m in re.finditer(rb"\n", self.data))]
        assert self.line_starts is not None
        line = min(_line_of(element), len(self.line_starts))
        start = self.line_starts[line - 1]
        positions = self._tags(line, start).get(str(element.tag), [])
        count = self.ordinals.get(element, 0)
        if count < len(positions):
            return self.base + positions[count]
        return self.base + start

    def _tags(self, line: int, start: int) -> dict[str, list[int]]:
        found = self.tags_on_line.get(line)
        if found is None:
            assert self.line_starts is not None
            end = self.line_starts[line] if line < len(self.line_starts) else len(self.data)
            found = {}
            for match in _START_TAG.finditer(self.data, start, end):
                found.setdefault(match.group(1).decode("ascii").lower(), []).append(match.start())
            self.tags_on_line[line] = found
        return found


_START_TAG = re.compile(rb"<([A-Za-z][A-Za-z0-9:._-]*)")


def _line_of(element: etree._Element) -> int:
    """The source line libxml2 found `element` on (1 when it does not know)."""
    line = element.sourceline
    return line if isinstance(line, int) and line > 0 else 1


def _breaks(element: etree._Element, side: str) -> bool:
    """Whether `element`'s style breaks the page on that side (before or after)."""
    style = element.get("style")
    return style is not None and any(m.group(1).lower() == side for m in _PAGE_BREAK.finditer(style))


def _hidden(element: etree._Element) -> bool:
    style = element.get("style")
    return bool(style and _HIDDEN.search(style)) or element.get("hidden") is not None


def _clean(text: str) -> str:
    return _SPACES.sub(" ", text.translate(_INVISIBLE)).strip()


def _row_line(cells: list[str]) -> str:
    """A table row as a line: its non-empty cells in order, currency signs and closing
    parentheses or percent signs kept with their numbers."""
    merged: list[str] = []
    carry = ""
    for cell in cells:
        if not cell:
            continue
        if cell in _JOIN_NEXT:
            carry += cell
            continue
        if merged and not carry and _JOIN_PREVIOUS.match(cell):
            merged[-1] += cell
            continue
        merged.append(carry + cell)
        carry = ""
    if carry:
        merged.append(carry)
    return CELL_SEPARATOR.join(merged)


def _join(lines: list[tuple[str, int]]) -> tuple[str, list[tuple[int, int]]]:
    parts: list[str] = []
    offsets: list[tuple[int, int]] = []
    at = 0
    for line, source in lines:
        offsets.append((at, source))
        parts.append(line)
        at += len(line) + 1
    return ("\n".join(parts) + "\n" if parts else ""), offsets
