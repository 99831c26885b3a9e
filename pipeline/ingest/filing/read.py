"""A filing file as what the model should read (pure): its format recognised by content, the
documents that carry its content, their readable text, and its metadata.

    submission  EDGAR's complete submission text file (`sgml`): the primary document and the
                exhibits PIPELINE_EXHIBIT_TYPES names, each converted by its own format;
                every other part counted with its reason (`choose`)
    html        an HTML or inline-XBRL primary document (`html`)
    xml         an XML document (a Form 4's ownership report) (`xml`)
    text        plain text, sent as it is (the caller decodes it)

The file's extension says nothing: an EDGAR `.txt` is a submission, a `.htm` may be one too.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pipeline.ingest.filing import choose, furniture, html, metadata, sgml, xbrl, xml
from pipeline.ingest.filing.html import Converted
from pipeline.ingest.filing.metadata import Metadata

SUBMISSION, HTML, XML, TEXT = "submission", "html", "xml", "text"
SNIFF_BYTES = 64 * 1024
MAX_PART_BYTES = 256 * 1024 * 1024
"""A document of a submission larger than this is not parsed (the biggest 10-K primary
documents are under 20 MB; exhibits that size are data)."""

_HTML_START = re.compile(rb"<(?:!doctype\s+html|html[\s>]|body[\s>]|head[\s>])", re.IGNORECASE)
_XML_START = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*<\?xml[^>]*\?>\s*(?:<!--.*?-->\s*)*<(?!html)", re.I | re.S)
_PAGE_TAG = re.compile(r"^[ \t]*<PAGE>[ \t]*\d*[ \t]*$", re.I)
"""A page break of EDGAR's plain-text documents, with the page number some filers put after it."""
_LAYOUT_TAGS = re.compile(r"</?(?:S|C|TABLE|CAPTION|FN)>", re.I)
"""The other layout tags of plain-text documents (Filer Manual: <TABLE>, <CAPTION>, <S>, <C>, <FN>)."""
_TAGGED = re.compile(rb"\A(?:\xef\xbb\xbf)?\s*<")
_ENTITY_DECLARATION = re.compile(rb"<!ENTITY", re.IGNORECASE)
DECLARES_ENTITIES = (
    "it declares entities in a DTD (an entity bomb, or a local file or address to read in): "
    "no filing does, and none of it is read"
)


@dataclass
class Intake:
    format: str
    text: str | None = None
    """What is stored and sent; None for plain text (the caller decodes it) and on a problem."""
    offsets: list[tuple[int, int]] = field(default_factory=list)
    meta: Metadata = field(default_factory=Metadata)
    taken: list[dict[str, Any]] = field(default_factory=list)
    """Each document read: type, file name, format, characters of text."""
    left_out: Counter[str] = field(default_factory=Counter)
    """Reason -> how many parts were left out for it."""
    left_out_types: dict[str, list[str]] = field(default_factory=dict)
    problem: str | None = None
    notes: list[str] = field(default_factory=list)
    revenue: xbrl.Revenue = field(default_factory=lambda: xbrl.Revenue(why=xbrl.NO_XBRL))
    """The filing's own total-revenue fact (the primary document's, else an exhibit's such as
    EX-13), or why there is none."""

    def summary(self) -> dict[str, Any]:
        """What the document row keeps of the intake (`documents.intake`)."""
        return {
            "format": self.format,
            "taken": self.taken,
            "left_out": [
                {"reason": reason, "count": count, "types": self.left_out_types.get(reason, [])}
                for reason, count in self.left_out.most_common()
            ],
            "notes": self.notes,
            "metadata_source": self.meta.source,
            "xbrl_revenue": self.revenue.why or self.revenue.concept,
        }


def format_of(data: sgml.Buffer) -> str:
    """submission, html, xml or text, from the file's first bytes."""
    head = bytes(data[:SNIFF_BYTES])
    if sgml.is_submission(head):
        return SUBMISSION
    if _TAGGED.match(head):
        if _HTML_START.search(head):
            return HTML
        if _XML_START.match(head):
            return XML
    return TEXT


def read(data: sgml.Buffer, *, exhibit_types: list[str], form_types: list[str]) -> Intake:
    """The filing in `data` (bytes or an mmap of the file), converted; plain text is left to
    the caller (`Intake.text` None, `format` text)."""
    kind = format_of(data)
    if kind == TEXT:
        return Intake(TEXT)
    if kind == SUBMISSION:
        intake = _submission(data, exhibit_types)
    else:
        raw = bytes(data[:])
        converted = _convert(raw, kind)
        intake = Intake(kind, converted.text, converted.offsets, metadata.from_dei(converted.dei))
        intake.revenue = xbrl.revenue_of(converted.facts, converted.cover_context)
        intake.taken.append({"type": intake.meta.form or "", "format": kind, "chars": len(converted.text)})
        if converted.problem:
            intake.problem = f"an {kind.upper()} file that cannot be read: {converted.problem}"
        elif not converted.text.strip():
            intake.problem = f"an {kind.upper()} file with no readable text (no body, or all of it hidden)"
    if intake.problem is None:
        intake.problem = _form_refused(intake.meta.form, form_types)
    return intake


def _form_refused(form: str | None, form_types: list[str]) -> str | None:
    if not form or choose._matches(form, form_types):
        return None
    return f"form type {form!r} is not one this pipeline reads: PIPELINE_FORM_TYPES lists those it does"


def _submission(data: sgml.Buffer, exhibit_types: list[str]) -> Intake:
    parsed = sgml.parse(data)
    meta = metadata.from_header(parsed.header)
    intake = Intake(SUBMISSION, meta=meta)
    if parsed.truncated:
        intake.problem = f"a truncated EDGAR submission: {parsed.truncated}"
        return intake
    if not parsed.parts:
        intake.problem = "an EDGAR submission with no <DOCUMENT> in it"
        return intake
    chosen = choose.choose(parsed.parts, meta.form, exhibit_types)
    for part, reason in chosen.left_out:
        _leave_out(intake, part, reason)
    if chosen.primary is None:
        intake.problem = (
            f"an EDGAR submission with no primary document: no <DOCUMENT> of type {meta.form!r}"
            if meta.form
            else "an EDGAR submission with no readable document"
        )
        return intake
    texts: list[str] = []
    at = 0
    facts = xbrl.Facts()
    cover: str | None = None
    for part in [chosen.primary, *chosen.exhibits]:
        kind = _part_format(data, part)
        converted = _convert_part(data, part, kind)
        if converted is None:
            _leave_out(intake, part, choose.PDF_COPY if part.wrapper == "PDF" else "over the size limit")
            continue
        if converted.problem:
            intake.problem = (
                f"{part.type or 'a document'} ({part.filename}) cannot be read: {converted.problem}"
            )
            return intake
        if not converted.text.strip():
            _leave_out(intake, part, choose.EMPTY)
            continue
        facts = facts.merged(converted.facts)  # an EX-13's facts use the primary's contexts
        if part is chosen.primary:
            intake.meta = meta.merged(metadata.from_dei(converted.dei))
            cover = converted.cover_context
        else:
            title = f"[{part.type}: {part.description or part.filename}]\n"
            texts.append(title)
            intake.offsets.append((at, part.start))
            at += len(title)
        texts.append(converted.text)
        intake.offsets.extend((at + offset, source) for offset, source in converted.offsets)
        at += len(converted.text)
        intake.taken.append(
            {
                "type": part.type,
                "filename": part.filename,
                "format": kind,
                "chars": len(converted.text),
            }
        )
    if not intake.taken:
        intake.problem = f"the primary document ({chosen.primary.type}) holds no readable text"
        return intake
    intake.revenue = xbrl.revenue_of(facts, cover)
    intake.text = "".join(texts)
    return intake


def _leave_out(intake: Intake, part: sgml.Part, reason: str) -> None:
    intake.left_out[reason] += 1
    types = intake.left_out_types.setdefault(reason, [])
    if part.type and part.type not in types and len(types) < 20:
        types.append(part.type)


def _part_format(data: sgml.Buffer, part: sgml.Part) -> str:
    head = bytes(data[part.start : min(part.end, part.start + SNIFF_BYTES)])
    if part.wrapper == "XML" or (_XML_START.match(head) and not _HTML_START.search(head)):
        return XML
    if part.filename.lower().endswith((".htm", ".html")) or _HTML_START.search(head):
        return HTML
    return TEXT


def _convert_part(data: sgml.Buffer, part: sgml.Part, kind: str) -> Converted | None:
    """The part's text, read as `kind` (`_part_format`); None when it is not read (too large, a PDF)."""
    if part.size > MAX_PART_BYTES or part.wrapper == "PDF":
        return None
    raw = bytes(data[part.start : part.end])
    if kind in (HTML, XML):
        return _convert(raw, kind, base=part.start)
    return Converted(_plain_text(raw), [(0, part.start)])


def _convert(raw: bytes, kind: str, *, base: int = 0) -> Converted:
    """An HTML or XML document's text; none for one that declares entities (the parsers expand
    none, but such a file is an attack, and is refused with its reason rather than half read)."""
    if _ENTITY_DECLARATION.search(raw):
        return Converted("", problem=DECLARES_ENTITIES)
    return html.convert(raw, base=base) if kind == HTML else xml.convert(raw, base=base)


def _plain_text(raw: bytes) -> str:
    """A plain-text document without its layout tags, its page breaks (`<PAGE>`) and the page
    numbers and running heads next to them (`furniture`, as for HTML)."""
    lines: list[tuple[str, int]] = []
    for line in _decode(raw).replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if _PAGE_TAG.match(line):
            lines.append((furniture.PAGE_BREAK, 0))
            continue
        kept = _LAYOUT_TAGS.sub("", line)
        if kept.strip() or not line.strip():  # a line that held only tags goes
            lines.append((kept.rstrip(), 0))
    return "\n".join(line for line, _ in furniture.drop(lines))


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", "replace")
