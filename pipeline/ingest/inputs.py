"""Finding and checking the files a user submits. Nothing is dropped silently.

Every path the user named ends as a usable file or as a rejected one with its reason;
the producer records both in `documents`.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class Candidate:
    """A file to read, or a path that cannot be one (`problem` says why)."""

    path: str
    problem: str | None = None


@dataclass(frozen=True)
class LoadedFile:
    path: str
    size_bytes: int
    sha256: str | None = None
    text: str | None = None
    problem: str | None = None
    note: str | None = None


NO_MATCH = "the pattern matches no file"
EMPTY_DIRECTORY = "the directory holds no file"
NOTHING_THERE = (NO_MATCH, EMPTY_DIRECTORY)


def expand(patterns: Sequence[str]) -> Iterator[Candidate]:
    """Files named by `patterns` (paths, globs, directories), in a stable order."""
    seen: set[str] = set()
    for pattern in patterns:
        for candidate in _expand_one(pattern):
            if candidate.path not in seen:
                seen.add(candidate.path)
                yield candidate


def _expand_one(pattern: str) -> Iterator[Candidate]:
    if glob.has_magic(pattern):
        matches = sorted(glob.glob(pattern, recursive=True))
        if not matches:
            yield Candidate(pattern, NO_MATCH)
        for match in matches:
            yield from _expand_one(match)
        return
    path = Path(pattern)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if not p.is_dir() and not p.name.startswith("."))
        if not files:
            yield Candidate(pattern, EMPTY_DIRECTORY)
        for file in files:
            yield _check(file)
        return
    yield _check(path)


def _check(path: Path) -> Candidate:
    shown = str(path)
    if not path.exists():
        return Candidate(shown, "no such file" if not path.is_symlink() else "broken link")
    if not path.is_file():
        return Candidate(shown, "not a regular file")
    return Candidate(shown)


def load(candidate: Candidate, max_bytes: int) -> LoadedFile:
    """Read and check one file: size, binary content, encoding; hash what is usable."""
    if candidate.problem:
        return LoadedFile(candidate.path, 0, problem=candidate.problem)
    try:
        size = os.path.getsize(candidate.path)
        if size > max_bytes:
            return LoadedFile(
                candidate.path, size, problem=f"{size:,} bytes is over the {max_bytes:,}-byte limit"
            )
        with open(candidate.path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return LoadedFile(candidate.path, 0, problem=f"cannot be read: {exc.strerror or exc}")
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return LoadedFile(candidate.path, len(data), problem="binary file (contains NUL bytes)")
    note = None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Legacy filings are often Windows-1252; latin-1 never fails, so nothing is lost.
        text = _decode_legacy(data)
        note = "not UTF-8: decoded as Windows-1252/Latin-1"
    if not text.strip():
        return LoadedFile(candidate.path, len(data), problem="empty or whitespace-only file")
    digest = hashlib.sha256(data).hexdigest()
    return LoadedFile(candidate.path, len(data), sha256=digest, text=text, note=note)


def _decode_legacy(data: bytes) -> str:
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")
