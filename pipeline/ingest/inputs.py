"""Checking the files a user submits. Nothing is dropped silently.

Every path the user named ends as a usable file or as a rejected one with its reason (finding
them, links refused: `walk`); the producer records both in `documents`.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import mmap
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import InputError
from pipeline.core.settings import Settings
from pipeline.ingest.filing.read import TEXT, Intake, format_of, read
from pipeline.ingest.walk import (
    NOT_REGULAR,
    NOTHING_THERE,
    Candidate,
    expand,
    link_not_followed,
    printable,
)

__all__ = [
    "NOTHING_THERE",
    "Candidate",
    "LoadedFile",
    "Reading",
    "check_bases",
    "expand",
    "load",
    "load_bytes",
    "printable",
    "stored_path",
]

MAX_CONTROL_SHARE = 0.01
"""Text has almost no control characters (tabs, line ends and form feeds aside); random bytes
decoded as Windows-1252 or Latin-1 have about one in ten. Above this share a file is binary."""
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufffd]")
BINARY_SIGNATURES = {
    b"%PDF-": "a PDF file, not text: convert it first (e.g. pdftotext)",
    b"PK\x03\x04": "a ZIP archive (docx, xlsx, …), not text",
    b"\x1f\x8b": "a gzip file, not text: decompress it first",
    b"\xd0\xcf\x11\xe0": "an OLE file (doc, xls), not text",
    b"\x89PNG": "a PNG image, not text",
    b"\xff\xd8\xff": "a JPEG image, not text",
    b"GIF8": "a GIF image, not text",
}
"""What a file starting with these bytes is: a named reason beats a share of control characters."""


@dataclass(frozen=True)
class Reading:
    """How files are read: the limits and PIPELINE_EXHIBIT_TYPES / PIPELINE_FORM_TYPES."""

    max_text_bytes: int = 8 * 1024 * 1024
    """The text that will be sent (after conversion), in UTF-8 bytes."""
    max_source_bytes: int = 1024 * 1024 * 1024
    """The file on disk: a 10-K's complete submission is often 10-60 MB."""
    exhibit_types: tuple[str, ...] = ("EX-13*", "EX-99*")
    form_types: tuple[str, ...] = ("*",)


def reading(settings: Settings) -> Reading:
    """How the intake reads files under `settings`."""
    return Reading(
        max_text_bytes=settings.max_file_bytes,
        max_source_bytes=settings.max_source_bytes,
        exhibit_types=_patterns(settings.exhibit_types),
        form_types=_patterns(settings.form_types) or ("*",),
    )


def _patterns(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


MMAP_FROM_BYTES = 4 * 1024 * 1024
"""A file this large is mapped, not read: a submission's parts are found in place and only the
documents taken are copied (memory stays bounded on a 100 MB submission)."""


@dataclass(frozen=True)
class LoadedFile:
    path: str
    size_bytes: int
    sha256: str | None = None
    text: str | None = None
    problem: str | None = None
    note: str | None = None
    intake: Intake | None = None
    """What the intake read (format, documents taken and left out, metadata); None for a file
    refused before it was read."""


def check_bases(patterns: Sequence[str]) -> None:
    """Raise InputError naming every pattern whose base directory is missing or unreadable.

    A glob under a directory that does not exist matches nothing, exactly as one over an empty
    inbox does; with `--new-only` that read as "nothing new" every night. A mistyped directory
    is the operator's mistake, not an empty night: the submit is refused before a run is stored.
    A missing file in an existing directory stays what it was, a `skipped` row with its reason.
    """
    problems = [problem for pattern in patterns if (problem := _base_problem(pattern))]
    if problems:
        raise InputError("; ".join(problems) + "; check the path (no run was started)")


def _base_problem(pattern: str) -> str | None:
    """Why nothing under `pattern` can be found, when its base directory is the reason."""
    if glob.has_magic(pattern):
        base = Path(fixed_part(pattern))
    else:  # "inbox/" names a directory; "inbox/x.txt" a file in one
        base = Path(pattern) if pattern.endswith(os.sep) else Path(pattern).parent
    if base.is_dir():
        return (
            None if os.access(base, os.R_OK | os.X_OK) else f"{pattern}: the directory {base} cannot be read"
        )
    if base.exists():
        return f"{pattern}: {base} is not a directory"
    return f"{pattern}: the directory {base} does not exist"


def fixed_part(pattern: str) -> str:
    """A glob's leading directories without wildcards (what must exist for it to match
    anything); a plain path as it is."""
    if not glob.has_magic(pattern):
        return pattern
    fixed: list[str] = []
    for part in Path(pattern).parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return str(Path(*fixed)) if fixed else "."


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""A link put in place of a checked file is not followed, and a FIFO does not block the open."""


def load(candidate: Candidate, max_bytes: int, reading: Reading | None = None) -> LoadedFile:
    """Read and check one file: its size, its format, binary content, encoding; convert what
    needs converting and hash what is usable. `max_bytes` bounds the text that will be sent;
    the file itself may be up to `reading.max_source_bytes`. What is opened is checked again once
    open: a regular file, not a link (a file that grows, or says it is empty as /proc's do, is read
    no further than the limit)."""
    reading = reading or Reading(max_text_bytes=max_bytes)
    if candidate.problem:
        return LoadedFile(candidate.path, 0, problem=candidate.problem)
    try:
        fd = os.open(candidate.open_path or candidate.path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return LoadedFile(candidate.path, 0, problem=link_not_followed(_directory_of(candidate.path)))
        return LoadedFile(candidate.path, 0, problem=f"cannot be read: {exc.strerror or exc}")
    source_limit = max(reading.max_source_bytes, max_bytes)
    with open(fd, "rb") as handle:
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                return LoadedFile(candidate.path, 0, problem=NOT_REGULAR)
            if status.st_size > source_limit:
                return LoadedFile(
                    candidate.path,
                    status.st_size,
                    problem=f"{status.st_size:,} bytes on disk is over the {source_limit:,}-byte limit "
                    "(PIPELINE_MAX_SOURCE_BYTES)",
                )
            if status.st_size >= MMAP_FROM_BYTES:
                with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
                    return load_bytes(candidate.path, mapped, max_bytes, reading)  # type: ignore[arg-type]
            data = handle.read((status.st_size or max_bytes) + 1)
        except OSError as exc:
            return LoadedFile(candidate.path, 0, problem=f"cannot be read: {exc.strerror or exc}")
    if not status.st_size and len(data) > max_bytes:  # /proc's files say they are empty
        return LoadedFile(candidate.path, len(data), problem=_over(len(data), max_bytes))
    return load_bytes(candidate.path, data, max_bytes, reading)


def _over(size: int, max_bytes: int) -> str:
    return f"{size:,} bytes of text is over the {max_bytes:,}-byte limit (PIPELINE_MAX_FILE_BYTES)"


def _directory_of(path: str) -> str:
    return printable(os.path.abspath(os.path.dirname(path) or "."))


def load_bytes(path: str, data: bytes, max_bytes: int = 0, reading: Reading | None = None) -> LoadedFile:
    """Check a file's bytes: an EDGAR submission, HTML or XML converted to its readable text
    (`pipeline.ingest.filing`), plain text decoded (UTF-8, else Windows-1252), or the reason it is
    not usable. `max_bytes` (0: none) bounds the text that will be sent."""
    reading = reading or Reading()
    if problem := _binary(data[:16]):
        return LoadedFile(path, len(data), problem=problem)
    kind = format_of(data)
    if kind != TEXT:
        return _converted(path, data, max_bytes, reading)
    if max_bytes and len(data) > max_bytes:
        return LoadedFile(path, len(data), problem=_over(len(data), max_bytes))
    data = bytes(data)
    if problem := _binary(data):
        return LoadedFile(path, len(data), problem=problem)
    note = None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Legacy filings are often Windows-1252; latin-1 never fails, so nothing is lost.
        text = _decode_legacy(data)
        note = "not UTF-8: decoded as Windows-1252/Latin-1"
    if problem := _not_text(text):
        return LoadedFile(path, len(data), problem=problem)
    digest = hashlib.sha256(data).hexdigest()
    return LoadedFile(path, len(data), sha256=digest, text=text, note=note, intake=Intake(TEXT))


def _converted(path: str, data: bytes, max_bytes: int, reading: Reading) -> LoadedFile:
    """A submission, HTML or XML file, as the text the intake converted it to."""
    intake = read(data, exhibit_types=list(reading.exhibit_types), form_types=list(reading.form_types))
    size = len(data)
    if intake.problem or intake.text is None:
        return LoadedFile(path, size, problem=intake.problem or "no readable text", intake=intake)
    text = intake.text.replace("\x00", "")
    if problem := _not_text(text):
        return LoadedFile(path, size, problem=problem, intake=intake)
    encoded = text.encode("utf-8", "replace")
    if max_bytes and len(encoded) > max_bytes:
        return LoadedFile(path, size, problem=_over(len(encoded), max_bytes), intake=intake)
    note = "; ".join(intake.notes) or None
    return LoadedFile(
        path, size, sha256=hashlib.sha256(encoded).hexdigest(), text=text, note=note, intake=intake
    )


def _not_text(text: str) -> str | None:
    if not text.strip():
        return "empty or whitespace-only file"
    controls = len(_CONTROL.findall(text))
    if controls > MAX_CONTROL_SHARE * len(text):
        return f"binary file: {controls / len(text):.1%} of its characters are control characters"
    return None


def stored_path(path: str) -> str:
    """`path` as `documents.path` keeps it: absolute (a relative path means nothing once the
    submitting shell's directory is gone, and the nightly's paths are absolute), normalised but
    with symlinks kept, so the name is the one the user gave."""
    return printable(os.path.abspath(path))


def _binary(data: bytes) -> str | None:
    """Why `data` is not text, judged by its bytes: a known signature, or a NUL anywhere (no
    text holds one, and Postgres refuses it in a text column)."""
    for signature, what in BINARY_SIGNATURES.items():
        if data.startswith(signature):
            return f"binary file: {what}"
    at = data.find(b"\x00")
    return None if at < 0 else f"binary file (a NUL byte at byte {at:,})"


def _decode_legacy(data: bytes) -> str:
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")
