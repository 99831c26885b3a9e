"""An XML filing document (a Form 3/4/5 ownership report) as text (pure): one line per element
that holds text, `path: value`, in document order.

The parser resolves no entity, loads no DTD and fetches nothing: a `<!DOCTYPE>` naming a local
file or an entity bomb leaves its references unexpanded (and the document is read as it stands).
"""

from __future__ import annotations

from lxml import etree

from pipeline.ingest.filing.html import Converted

MAX_LINES = 20_000


def convert(data: bytes, *, base: int = 0) -> Converted:
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, recover=True, remove_comments=True
    )
    try:
        root = etree.fromstring(data, parser=parser)
    except etree.XMLSyntaxError:
        return Converted("")
    if root is None:
        return Converted("")
    lines: list[str] = []
    offsets: list[tuple[int, int]] = []
    at = 0
    names: list[str] = []
    for event, element in etree.iterwalk(root, events=("start", "end")):
        if not isinstance(element.tag, str):
            continue
        if event == "end":
            names.pop()
            continue
        names.append(etree.QName(element).localname)
        value = " ".join((element.text or "").split())
        if value and len(lines) < MAX_LINES:
            line = f"{' / '.join(names[-2:])}: {value}"
            offsets.append((at, base))
            lines.append(line)
            at += len(line) + 1
    return Converted("\n".join(lines) + "\n" if lines else "", offsets)
