"""EDGAR's complete submission text file, parsed once (pure): its header and its documents.

A submission (EDGAR Public Dissemination Service, the `.txt` beside every filing) is an SGML
wrapper: a header (`<SEC-HEADER>` of `KEY: value` lines, or `<SUBMISSION>` of `<TAG>value` lines),
then one `<DOCUMENT>` per file of the filing, each with `<TYPE>`, `<SEQUENCE>`, `<FILENAME>`,
`<DESCRIPTION>` and a `<TEXT>` body. A body is HTML, plain text, XML (XBRL, Form 4), a PDF or a
uuencoded binary (`begin 644 name.jpg`), sometimes inside an `<XBRL>`, `<XML>` or `<PDF>` tag.

This reads the file's bytes (a `bytes` or an `mmap`) with byte patterns, and copies nothing but
the header: a 100 MB submission costs its chosen documents' text, not its size. Positions are
byte offsets into the file.
"""

from __future__ import annotations

import mmap
import re
from dataclasses import dataclass
from typing import Protocol

HEAD_SCAN_BYTES = 64 * 1024
"""Where the wrapper's opening tag must be found for a file to be a submission."""
MAX_HEADER_BYTES = 2 * 1024 * 1024
SCAN_WINDOW_BYTES = 8 * 1024 * 1024
TAIL_BYTES = 1024
"""How far before `</DOCUMENT>` its `</TEXT>` (and a wrapper's closing tag) is looked for."""
"""A document's end is looked for this much at a time (a mapped file's pages behind are dropped)."""
"""A header longer than this (a submission lists its filers there: a few KB) is not read whole."""

_OPENING = re.compile(
    rb"\A(?:\xef\xbb\xbf)?\s*(?:-----BEGIN PRIVACY-ENHANCED MESSAGE-----.*?\n\s*\n\s*)?"
    rb"<(SEC-DOCUMENT|SUBMISSION|IMS-DOCUMENT|DOCUMENT)>",
    re.IGNORECASE | re.DOTALL,
)
"""The wrapper's opening tag, first in the file or after the PEM preamble (its signature's
fields, then a blank line) that EDGAR put around submissions until 2009."""
_DOCUMENT = re.compile(rb"<DOCUMENT>", re.IGNORECASE)
_DOCUMENT_END = re.compile(rb"</DOCUMENT>", re.IGNORECASE)
_FIELD = re.compile(rb"<(TYPE|SEQUENCE|FILENAME|DESCRIPTION)>[ \t]*([^\r\n<]*)", re.IGNORECASE)
_TEXT = re.compile(rb"<TEXT>[ \t]*\r?\n?", re.IGNORECASE)
_TEXT_END = re.compile(rb"</TEXT>", re.IGNORECASE)
_WRAPPER = re.compile(rb"\A\s*<(XBRL|XML|PDF|JSON)>[ \t]*\r?\n?", re.IGNORECASE)
_UUENCODED = re.compile(rb"\A\s*begin [0-7]{3,4} \S")


class Buffer(Protocol):
    """What the parser reads: bytes, or an mmap of the file."""

    def __len__(self) -> int: ...
    def __getitem__(self, key: slice) -> bytes: ...
    def find(self, sub: bytes, start: int = ..., end: int = ...) -> int: ...


@dataclass(frozen=True)
class Part:
    """One `<DOCUMENT>` of a submission: its fields and where its body lies in the file."""

    type: str
    sequence: str
    filename: str
    description: str
    start: int
    """The body's first byte (after `<TEXT>` and any `<XBRL>`/`<XML>`/`<PDF>` wrapper)."""
    end: int
    wrapper: str | None
    """XBRL, XML, PDF or JSON when the body sits in such a tag; None otherwise."""
    uuencoded: bool

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Submission:
    header: str
    """The header's text, decoded (`header.parse` reads it)."""
    parts: list[Part]
    truncated: str | None = None
    """Why the file ends before its wrapper does (a download cut short), or None."""


def is_submission(data: Buffer) -> bool:
    """Whether the file opens as EDGAR's SGML wrapper does."""
    return _OPENING.match(data[:HEAD_SCAN_BYTES]) is not None


def parse(data: Buffer) -> Submission:
    """The header and every document of a submission, in file order."""
    first = _DOCUMENT.search(data[:MAX_HEADER_BYTES])
    header_end = first.start() if first else min(len(data), MAX_HEADER_BYTES)
    header = bytes(data[:header_end]).decode("utf-8", "replace")
    parts: list[Part] = []
    truncated = None
    at = header_end
    while True:
        opening = _DOCUMENT.search(data, at)  # type: ignore[call-overload]
        if opening is None:
            break
        closing = _find_end(data, opening.end())
        part_end = closing.start() if closing else len(data)
        part = _part(data, opening.end(), part_end)
        if closing is None:
            truncated = (
                f"the file ends inside document {len(parts) + 1} ({part.type or 'no type'}): cut short?"
            )
        parts.append(part)
        if closing is None:
            break
        _release(data, opening.start(), closing.end())  # read again only if it is taken
        at = closing.end()
    return Submission(header, parts, truncated)


def _find_end(data: Buffer, start: int) -> re.Match[bytes] | None:
    """The `</DOCUMENT>` after `start`, looked for a window at a time; behind each window, a
    mapped file's pages are handed back (`_release`), so that scanning a 60 MB uuencoded ZIP does
    not keep 60 MB resident: memory follows the documents taken, not the file."""
    at = start
    while at < len(data):
        window_end = min(len(data), at + SCAN_WINDOW_BYTES)
        found = _DOCUMENT_END.search(data, at, window_end)  # type: ignore[call-overload]
        if found is not None:
            return found  # type: ignore[no-any-return]
        _release(data, at, window_end - len(b"</DOCUMENT>"))
        at = window_end - len(b"</DOCUMENT>")  # a tag across the windows' edge is found next time
        if window_end == len(data):
            break
    return None


def _release(data: Buffer, start: int, end: int) -> None:
    """Drop the pages of `data[start:end]` from this process's memory, when `data` maps a file
    (they stay in the page cache; reading them again faults them back in)."""
    if not isinstance(data, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = end // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first:
        data.madvise(mmap.MADV_DONTNEED, first, last - first)


def _part(data: Buffer, start: int, end: int) -> Part:
    text = _TEXT.search(data, start, end)  # type: ignore[call-overload]
    fields_end = text.start() if text else end
    fields = {
        name.decode().upper(): value.decode("utf-8", "replace").strip()
        for name, value in _FIELD.findall(data[start:fields_end])
    }
    body_start = text.end() if text else fields_end
    tail = max(body_start, end - TAIL_BYTES)  # </TEXT> closes the document: not a scan of the body
    text_end = _TEXT_END.search(data, tail, end)  # type: ignore[call-overload]
    body_end = text_end.start() if text_end else end
    wrapper = None
    head = data[body_start : min(body_end, body_start + 256)]
    if found := _WRAPPER.match(head):
        wrapper = found.group(1).decode().upper()
        body_start += found.end()
        head = data[body_start : min(body_end, body_start + 256)]
        if closing := re.search(
            rb"</" + wrapper.encode() + rb">\s*\Z", data[max(body_start, body_end - 64) : body_end], re.I
        ):
            body_end = max(body_start, body_end - 64) + closing.start()
    return Part(
        type=fields.get("TYPE", ""),
        sequence=fields.get("SEQUENCE", ""),
        filename=fields.get("FILENAME", ""),
        description=fields.get("DESCRIPTION", ""),
        start=body_start,
        end=body_end,
        wrapper=wrapper,
        uuencoded=_UUENCODED.match(head) is not None,
    )
