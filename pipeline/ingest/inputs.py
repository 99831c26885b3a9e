"""Checking the files a user submits. Nothing is dropped silently.

Every path the user named ends as a usable file or as a rejected one with its reason (finding
them, links refused: `walk`); the producer records both in `documents`.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import InputError
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
class LoadedFile:
    path: str
    size_bytes: int
    sha256: str | None = None
    text: str | None = None
    problem: str | None = None
    note: str | None = None


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


def load(candidate: Candidate, max_bytes: int) -> LoadedFile:
    """Read and check one file: size, binary content, encoding; hash what is usable. What is
    opened is checked again once open: a regular file, not a link, at most `max_bytes` (a file
    that grows, or says it is empty as /proc's do, is read no further than that)."""
    if candidate.problem:
        return LoadedFile(candidate.path, 0, problem=candidate.problem)
    try:
        fd = os.open(candidate.open_path or candidate.path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return LoadedFile(candidate.path, 0, problem=link_not_followed(_directory_of(candidate.path)))
        return LoadedFile(candidate.path, 0, problem=f"cannot be read: {exc.strerror or exc}")
    with open(fd, "rb") as handle:
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                return LoadedFile(candidate.path, 0, problem=NOT_REGULAR)
            data = b"" if status.st_size > max_bytes else handle.read(max_bytes + 1)
        except OSError as exc:
            return LoadedFile(candidate.path, 0, problem=f"cannot be read: {exc.strerror or exc}")
    size = max(status.st_size, len(data))
    if size > max_bytes:
        return LoadedFile(
            candidate.path, size, problem=f"{size:,} bytes is over the {max_bytes:,}-byte limit"
        )
    return load_bytes(candidate.path, data)


def _directory_of(path: str) -> str:
    return printable(os.path.abspath(os.path.dirname(path) or "."))


def load_bytes(path: str, data: bytes) -> LoadedFile:
    """Check a file's bytes: text (UTF-8, else Windows-1252) or the reason it is not."""
    if problem := _binary(data):
        return LoadedFile(path, len(data), problem=problem)
    note = None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Legacy filings are often Windows-1252; latin-1 never fails, so nothing is lost.
        text = _decode_legacy(data)
        note = "not UTF-8: decoded as Windows-1252/Latin-1"
    if not text.strip():
        return LoadedFile(path, len(data), problem="empty or whitespace-only file")
    controls = len(_CONTROL.findall(text))
    if controls > MAX_CONTROL_SHARE * len(text):
        share = controls / len(text)
        return LoadedFile(
            path,
            len(data),
            problem=f"binary file: {share:.1%} of its characters are control characters",
        )
    digest = hashlib.sha256(data).hexdigest()
    return LoadedFile(path, len(data), sha256=digest, text=text, note=note)


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
