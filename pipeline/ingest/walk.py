"""Finding the files a user named (paths, globs, directories), and no file outside them.

A filing is untrusted input, and so is an inbox anyone can drop files into: a symbolic link
there named `filing 10-K.txt` could point at a mode-600 env file, whose text would go to the
provider. So each named path has a root, the directory that was named:

- a directory: itself (`inbox/` or `inbox`);
- a glob: its leading directories without wildcards (`inbox` for `inbox/**/*.txt`);
- a file: the directory holding it (`inbox` for `inbox/a.txt`, as a shell expands `inbox/*.txt`).

The root's own path is the operator's and is taken as written, links included (`/data/inbox`
may be a link to a mounted volume). Below it, every link (to a file or to a directory, or a
file argument that is itself a link) is refused by default; with `follow_links` a link is read
only when it resolves under the root's real path. A link at the end of a named path is a link
in its parent directory: name a linked directory `inbox/` (the trailing slash resolves it) to
read it as the root. Special files (FIFOs, sockets, devices) are refused, and a directory is
listed without following any link, so a link loop neither hangs nor repeats a submit.

Every refusal is a `Candidate` with its problem: the producer stores it as a `skipped` row.
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Candidate:
    """A file to read, or a path that cannot be one (`problem` says why)."""

    path: str
    problem: str | None = None
    open_path: str | None = None
    """What to open when it is not `path`: the file's real path (a followed link's target)."""
    raw_path: str | None = None
    """The path as the file system spells it when `path` cannot (a name that is not UTF-8):
    two such names may print alike, and each is its own row."""


NO_MATCH = "the pattern matches no file"
EMPTY_DIRECTORY = "the directory holds no file"
NOTHING_THERE = (NO_MATCH, EMPTY_DIRECTORY)
NOT_REGULAR = "not a regular file"
BROKEN_LINK = "broken link"
LINK_LOOP = "a symbolic link loop: it never reaches a file"
LINK_TO_ANCESTOR = "a symbolic link to a directory that holds it (a loop)"


def link_not_followed(root: str) -> str:
    return f"a symbolic link, not followed: --follow-links (PIPELINE_FOLLOW_LINKS) reads links that resolve under {root}"


def link_outside(target: str, root: str) -> str:
    return f"a symbolic link out of the named directory: it resolves to {target}, outside {root}"


def link_read_already(target: str) -> str:
    return f"a symbolic link to a directory read already: {target}"


def expand(patterns: Sequence[str], *, follow_links: bool = False) -> Iterator[Candidate]:
    """Files named by `patterns` (paths, globs, directories), in a stable order, each once."""
    seen: set[str] = set()
    for pattern in patterns:
        for candidate in _expand_one(pattern, follow_links):
            key = candidate.raw_path or candidate.path
            if key not in seen:
                seen.add(key)
                yield candidate


def _expand_one(pattern: str, follow_links: bool) -> Iterator[Candidate]:
    if glob.has_magic(pattern):
        parts = Path(pattern).parts
        fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
        walk = _Walk(os.path.join(*parts[:fixed]) if fixed else "", follow_links)
        yield from _or(
            walk.run(walk.root, walk.real_root, parts[fixed:]), Candidate(printable(pattern), NO_MATCH)
        )
        return
    path = str(Path(pattern))  # shown without "./" or a trailing slash, ".." kept
    if os.path.islink(pattern):  # "inbox/a.txt" or "inbox" as a link ("inbox/" resolves it)
        parent, name = os.path.split(path)
        walk = _Walk(parent, follow_links)
        yield from walk.run_link(path, os.path.join(walk.real_root, name))
    elif os.path.isdir(pattern):
        walk = _Walk(pattern, follow_links)
        found = walk.run("" if path == "." else path, walk.real_root, None)
        yield from _or(found, Candidate(printable(path), EMPTY_DIRECTORY))
    else:
        yield _file(path, path)


def _or(found: Iterator[Candidate], nothing: Candidate) -> Iterator[Candidate]:
    """`found`, as the walk finds it; `nothing` (why the named path gave no file) when it is empty."""
    empty = True
    for candidate in found:
        empty = False
        yield candidate
    if empty:
        yield nothing


class _Walk:
    """One named path's walk: what is under `root`, listed without following a link unless
    `follow` and the link resolves under the root; each real directory entered once per
    remaining pattern (a link loop ends there)."""

    def __init__(self, root: str, follow: bool) -> None:
        self.root, self.follow = root, follow
        self.real_root = os.path.realpath(root or ".")
        self.shown_root = printable(os.path.abspath(root or "."))
        self.entered: set[tuple[str, tuple[str, ...] | None]] = set()
        self.linked: list[tuple[str, str, tuple[str, ...] | None]] = []
        """Followed links to directories, walked after the real ones: (shown, real, parts)."""

    def run(self, shown: str, real: str, parts: tuple[str, ...] | None) -> Iterator[Candidate]:
        """What `parts` (None: every file) matches under the directory `real`, shown as
        `shown`, then under the followed links found on the way. Found as it is taken: each
        directory is listed (sorted) when the walk reaches it, so the first files of a large
        directory tree are read while the rest is still to be listed."""
        yield from self._match(shown, real, parts)
        yield from self._linked_directories()

    def run_link(self, shown: str, disk: str) -> Iterator[Candidate]:
        """A named path that is itself a link: a link in its parent directory."""
        yield from self._link(shown, disk, self.real_root, None)
        yield from self._linked_directories()

    def _linked_directories(self) -> Iterator[Candidate]:
        while self.linked:
            shown, target, parts = self.linked.pop(0)
            if (target, parts) in self.entered:
                yield Candidate(printable(shown), link_read_already(printable(target)))
            else:
                yield from self._match(shown, target, parts)

    def _match(self, shown: str, real: str, parts: tuple[str, ...] | None) -> Iterator[Candidate]:
        """`parts` is the rest of a glob (`**` any depth of non-hidden directories, else one
        name), None for every file at any depth (a named directory, hidden files left out)."""
        if (real, parts) in self.entered:
            return
        self.entered.add((real, parts))
        if parts is not None and parts[0] == "**":
            yield from self._match(shown, real, parts[1:] or None)  # zero directories
        entries, problem = _listing(real)
        if problem:
            yield Candidate(printable(shown), problem)
        for entry in entries:
            entry_shown = os.path.join(shown, entry.name)
            if parts is None or parts[0] == "**":
                if entry.name.startswith(".") and (parts is not None or not _is_dir(entry)):
                    continue  # hidden files are not filings; glob's ** skips hidden directories
                if _is_dir(entry):
                    yield from self._match(entry_shown, entry.path, parts)
                elif entry.is_symlink():
                    if parts is None or os.path.isdir(entry.path):
                        yield from self._link(entry_shown, entry.path, real, parts)
                elif parts is None:
                    yield _file(entry_shown, entry.path, entry)
                continue
            if not _matches(entry.name, parts[0]):
                continue
            rest = parts[1:] or None
            if entry.is_symlink():
                if rest is None or os.path.isdir(entry.path):
                    yield from self._link(entry_shown, entry.path, real, rest)
            elif _is_dir(entry):
                yield from self._match(entry_shown, entry.path, rest)  # a matched directory: its files
            elif rest is None:
                yield _file(entry_shown, entry.path, entry)

    def _link(
        self, shown: str, disk: str, real_parent: str, parts: tuple[str, ...] | None
    ) -> Iterator[Candidate]:
        """A link met in the directory `real_parent` under the root: refused, read (a file) or
        walked later (a directory)."""
        if printable(shown) != shown:
            yield _file(shown, disk)
            return
        if not self.follow:
            yield Candidate(shown, link_not_followed(self.shown_root))
            return
        try:
            target = os.path.realpath(disk, strict=True)
        except OSError as exc:
            gone = isinstance(exc, FileNotFoundError)
            yield Candidate(
                shown, BROKEN_LINK if gone else LINK_LOOP if exc.errno == errno.ELOOP else _unreadable(exc)
            )
            return
        if not _under(target, self.real_root):
            yield Candidate(shown, link_outside(printable(target), self.shown_root))
        elif os.path.isdir(target) and _under(real_parent, target):
            yield Candidate(shown, LINK_TO_ANCESTOR)
        elif os.path.isdir(target):
            self.linked.append((shown, target, parts))
        else:
            yield _file(shown, target)


def _under(path: str, directory: str) -> bool:
    return os.path.commonpath([path, directory]) == directory


def _listing(real: str) -> tuple[list[os.DirEntry[str]], str | None]:
    try:
        with os.scandir(real) as entries:
            return sorted(entries, key=lambda entry: entry.name), None
    except FileNotFoundError:  # gone since it was named: nothing there (the pattern's row says so)
        return [], None
    except OSError as exc:
        return [], f"the directory {_unreadable(exc)}"


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _matches(name: str, part: str) -> bool:
    """glob's rule for one name: hidden names only when the pattern starts with a dot."""
    if name.startswith(".") and not part.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, part)


def _file(shown: str, disk: str, entry: os.DirEntry[str] | None = None) -> Candidate:
    """A path met as a file: usable when its name is UTF-8 and it is a regular file (not followed
    when it is a link: a named link is `_expand_one`'s)."""
    printed = printable(shown)
    if printed != shown:
        return Candidate(printed, "the file name is not valid UTF-8 (rename the file)", raw_path=shown)
    try:
        regular = entry.is_file(follow_symlinks=False) if entry else os.path.isfile(disk)
    except OSError as exc:
        return Candidate(shown, _unreadable(exc))
    if not regular:
        return Candidate(shown, NOT_REGULAR if os.path.lexists(disk) else "no such file")
    return Candidate(shown, open_path=None if disk == shown else disk)


def _unreadable(exc: OSError) -> str:
    return f"cannot be read: {exc.strerror or exc}"


def printable(path: str) -> str:
    """`path` as it can be stored and shown: bytes of a file name that are not UTF-8 (which
    Python keeps as lone surrogates, and no database column takes) become U+FFFD."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
