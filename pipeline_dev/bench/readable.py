"""The yardstick of readable text (issue 46): what a reader of an HTML filing sees.

The project's measure (/work/shared/tools/readable_tokens.py), reimplemented so that the bench
does not depend on a file outside the repository: no head, style, script, title or ix:header;
nothing under `display:none`; block elements as line breaks, table cells followed by a tab;
whitespace collapsed, blank lines squeezed. It is a measure, not a converter: the intake's own is
`pipeline.ingest.filing.html`.

One difference, on purpose: the original tries libxml2's XML parser first (in recover mode),
which stops early on some old filings that are not XHTML and so counts only their start; this
parses with lxml's HTML parser, as the intake does, and reads every filing whole.
"""

from __future__ import annotations

from lxml import etree
from lxml import html as lxml_html

BLOCK = frozenset(
    {
        "p", "div", "br", "tr", "table", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
        "section", "article", "center", "pre", "blockquote", "dl", "dt", "dd", "caption", "body",
        "html",
    }
)  # fmt: skip
CELL = frozenset({"td", "th"})
SKIP = frozenset({"head", "style", "script", "title", "header"})
"""`header` is ix:header once its prefix is dropped (and HTML5's <header>, as the original does)."""


def parse(data: bytes) -> etree._Element | None:
    """The document's tree by lxml's HTML parser (UTF-8, else Windows-1252); None if empty."""
    try:
        data.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        encoding = "cp1252"
    parser = lxml_html.HTMLParser(
        encoding=encoding, recover=True, no_network=True, remove_comments=True, remove_pis=True
    )
    try:
        return lxml_html.document_fromstring(data, parser=parser)
    except (etree.ParserError, ValueError):
        return None


def readable_text(data: bytes) -> str:
    """The text a reader of the HTML document `data` sees, by the yardstick's rules."""
    root = parse(data)
    return "" if root is None else visible_text(root)


def visible_text(root: etree._Element) -> str:
    out: list[str] = []
    skipped: set[etree._Element] = set()
    walker = etree.iterwalk(root, events=("start", "end"))
    for event, element in walker:
        local = str(element.tag).split("}")[-1].split(":")[-1].lower()
        if event == "start":
            if local in SKIP or "display:none" in (element.get("style") or "").replace(" ", "").lower():
                skipped.add(element)
                walker.skip_subtree()
                continue
            if local in BLOCK:
                out.append("\n")
            if element.text:
                out.append(element.text)
            continue
        if element in skipped:
            skipped.discard(element)
        elif local in BLOCK:
            out.append("\n")
        elif local in CELL:
            out.append("\t")
        if element.tail:
            out.append(element.tail)
    return squeezed("".join(out))


def squeezed(text: str) -> str:
    """Each line's whitespace collapsed, runs of blank lines as one, no-break spaces as spaces."""
    lines = [" ".join(line.split()) for line in text.replace("\u00a0", " ").split("\n")]
    kept: list[str] = []
    for line in lines:
        if line or (kept and kept[-1]):
            kept.append(line)
    return "\n".join(kept).strip() + "\n"
