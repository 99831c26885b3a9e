"""Filing sections: 10-K/10-Q item headings, and chunks that follow them (pure).

A heading is an "Item 1A." (or "ITEM 7 -", "Item 8 Financial Statements", "Part II, Item 1A")
at the start of a line: the intake's converted text puts each heading on a line of its own.
A table of contents lists every heading again, each followed by a few characters: where an item
is found more than once, the occurrence with the longest section is the item and the others are
not headings. A 10-Q's items are named with their part ("Part II, Item 1A"), since its two parts
number their items alike.

A section is doubted, reported and not used when its heading does not name what the item is for
(Item 7 without "management's discussion"), or when it is too short to hold it without saying
why (an Item 1A of a few lines that does not say "not applicable" or refer elsewhere).

A chunk is one or more whole sections when they fit the token budget (tiny sections are merged
with their neighbours), or a window of one long section (split with overlap, as
`chunking.split` does). Every character of the text lies in some chunk.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.core.constants import CHARS_PER_TOKEN
from pipeline.ingest.chunking import ChunkSpan, estimate_tokens, split

SECTION_NAME_CHARS = 40
_HEADING = re.compile(
    r"^[ \t]*(?:part[ \t]+(?P<part>iv|i{1,3})\b[ \t]*[,.:\-\u2013\u2014]?[ \t]*)?"
    r"item[ \t\u00a0]+(?P<num>\d{1,2}[a-c]?)\b(?!\.\d)[ \t]*(?P<after>[.:\-\u2013\u2014|]|$|(?-i:[A-Z(\"\u201c]))",
    re.IGNORECASE | re.MULTILINE,
)
_PART = re.compile(r"^[ \t]*part[ \t]+(iv|i{1,3})\b[ \t]*(?:[.:\-\u2013\u2014|]|$|(?-i:[A-Z]))", re.I | re.M)
LOOK_FOR = {
    "Item 1A": "the risk factors",
    "Item 7": "total revenue and the fiscal year (management's discussion and analysis)",
    "Item 8": "total revenue and the fiscal year (financial statements)",
    "Part I, Item 1": "total revenue and the fiscal year (financial statements)",
    "Part I, Item 2": "total revenue and the fiscal year (management's discussion and analysis)",
    "Part II, Item 1A": "the risk factors",
}
"""What a section is the place for, told to the model with the chunk."""

BODY_SECTION_CHARS = 2_000
"""The first section at least this long starts the filing's body: an item met before it (in a
table of contents) is taken from the body when it is there too, however short."""
TOC_SECTION_CHARS = 400
"""An item occurrence followed by fewer characters than this, when the item occurs again, is
a table-of-contents line (or a cross-reference), not the item's heading."""
_TITLE_WORDS: dict[str, tuple[str, ...]] = {
    "Item 1": ("business",),
    "Item 1A": ("risk",),
    "Item 1B": ("unresolved", "staff"),
    "Item 1C": ("cybersecurity", "cyber"),
    "Item 2": ("properties", "property"),
    "Item 3": ("legal", "proceedings"),
    "Item 7": ("management", "md&a"),
    "Item 7A": ("market risk", "quantitative"),
    "Item 8": ("financial statements", "financial data"),
    "Part I, Item 1": ("financial statements",),
    "Part I, Item 2": ("management", "md&a"),
    "Part II, Item 1A": ("risk",),
}
"""Words an item's heading (its line and the next) says: otherwise it is doubted."""
WHOLE_FILING_CHARS = 50_000
"""A section's size is judged only in a text this long (a whole filing): a short excerpt's items
are short."""
_MIN_CHARS = {"Item 1A": 1_000, "Item 7": 1_000, "Item 8": 1_000, "Part II, Item 1A": 150}
_EXPLAINED = re.compile(
    r"not applicable|smaller reporting compan|not required|incorporated\s+(?:herein\s+)?by\s+reference|"
    r"(?:see|refer to|included in|set forth in|appears? (?:in|under)|contained in)\b|no material changes|omitted",
    re.IGNORECASE,
)
QUARTERLY = ("10-Q",)
ITEMIZED = ("10-K", "10-Q")
"""The forms whose items these are (10-K405, 10-KT and amendments included); text whose form is
not known is read for them too."""
_FLAGS = re.IGNORECASE | re.MULTILINE
_MDA = r"management[’']?s\s+discussion\s+and\s+analysis(?:\s+of\s+financial\s+condition\s+and\s+results\s+of\s+operations)?"
_TITLES = {
    "Item 1A": re.compile(r"^[ \t]*risk\s+factors\.?[ \t]*$", _FLAGS),
    "Item 7": re.compile(rf"^[ \t]*{_MDA}\.?[ \t]*$", _FLAGS),
    "Item 8": re.compile(r"^[ \t]*financial\s+statements\s+and\s+supplementary\s+data\.?[ \t]*$", _FLAGS),
}
"""An item's title on a line of its own: where a filing has no "Item" heading for it."""
_QUARTERLY_TITLES = {"Part I, Item 2": _TITLES["Item 7"], "Part II, Item 1A": _TITLES["Item 1A"]}
_SECTION_NAME = re.compile(r"(?:Part I{1,3}V?, )?Item \d{1,2}[A-C]?")


@dataclass(frozen=True)
class Section:
    name: str  # "Item 1A"; "Part II, Item 1A" in a 10-Q; "Cover" before the first heading
    start: int
    end: int


@dataclass
class Found:
    sections: list[Section]
    doubted: list[dict[str, object]] = field(default_factory=list)
    """Headings not used, each with its name, where it lies and why."""

    def summary(self) -> dict[str, object]:
        return {
            "found": [{"name": s.name, "chars": s.end - s.start} for s in self.sections if s.name != "Cover"],
            "doubted": self.doubted,
        }


def find_sections(text: str, form: str | None = None, *, check: bool = True) -> list[Section]:
    """The text cut at item headings, in order; [] when it has none."""
    return locate(text, form, check=check).sections


def locate(text: str, form: str | None = None, *, check: bool = True) -> Found:
    """The sections of `text` (of a filing of `form`), and the headings doubted (none when not
    `check`: a chunk's text, a part of a filing, is too short to judge sizes by)."""
    if form and not form.upper().startswith(ITEMIZED):
        return Found([])  # an 8-K's "Item 2.02", a proxy's proposals: not these items
    quarterly = (form or "").upper().startswith(QUARTERLY)
    parts = [(m.start(), m.group(1).upper()) for m in _PART.finditer(text)]
    heads: list[tuple[int, str]] = []
    for match in _HEADING.finditer(text):
        part = match.group("part")
        if part is None and quarterly:
            part = next((p for at, p in reversed(parts) if at <= match.start()), "I")
        number = match.group("num").upper()
        name = f"Part {part.upper()}, Item {number}" if quarterly and part else f"Item {number}"
        heads.append((match.start(), name))
    named = {name for _, name in heads}
    heads = _without_contents(heads, len(text))
    found = Found([])
    kept: list[tuple[int, str]] = []
    for i, (start, name) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
        doubt = _doubt(text, name, start, end) if check else None
        if doubt:
            found.doubted.append({"name": name, "at": start, "chars": end - start, "why": doubt})
        else:
            kept.append((start, name))
    kept = _by_title(text, kept, quarterly, named)
    if not kept:
        return found
    if kept[0][0] > 0:
        kept.insert(0, (0, "Cover"))
    ends = [s for s, _ in kept[1:]] + [len(text)]
    found.sections = [Section(name, start, end) for (start, name), end in zip(kept, ends, strict=True)]
    return found


def _without_contents(heads: list[tuple[int, str]], length: int) -> list[tuple[int, str]]:
    """Each item once. A run of three or more short sections is a table of contents (or a
    cross-reference index): its headings go where the item is found elsewhere. Of what is left,
    the occurrence with the longest section is the item."""
    sizes = _sizes(heads, length)
    listing: set[int] = set()
    run: list[int] = []
    for i, size in enumerate([*sizes, length]):
        if i < len(sizes) and size < TOC_SECTION_CHARS:
            run.append(i)
            continue
        if len(run) >= 3:
            listing.update(run)
        run = []
    elsewhere = {name for i, (_, name) in enumerate(heads) if i not in listing}
    heads = [head for i, head in enumerate(heads) if i not in listing or head[1] not in elsewhere]
    sizes = _sizes(heads, length)
    body = next(
        (start for (start, _), size in zip(heads, sizes, strict=True) if size >= BODY_SECTION_CHARS), 0
    )
    best: dict[str, int] = {}
    for i, (start, name) in enumerate(heads):
        # In the body (from the first long section on) before the listings ahead of it; then longest.
        rank = (start >= body, sizes[i])
        if name not in best or rank > (heads[best[name]][0] >= body, sizes[best[name]]):
            best[name] = i
    return [head for i, head in enumerate(heads) if best[head[1]] == i]


def _sizes(heads: list[tuple[int, str]], length: int) -> list[int]:
    return [(heads[i + 1][0] if i + 1 < len(heads) else length) - start for i, (start, _) in enumerate(heads)]


def _by_title(
    text: str, kept: list[tuple[int, str]], quarterly: bool, named: set[str]
) -> list[tuple[int, str]]:
    """Items a filing heads by their title alone ("Risk Factors" on a line of its own, as some
    10-Ks laid out as an annual report do), for those no "Item" heading gave but the filing names
    (in its table of contents or cross-reference index: an older 10-K without an Item 1A may say
    "Risk Factors" inside its MD&A): the title line followed by the longest section."""
    have = {name for _, name in kept}
    found: list[tuple[int, str]] = []
    for name, title in (_QUARTERLY_TITLES if quarterly else _TITLES).items():
        if name in have or name not in named:
            continue
        starts = sorted([at for at, _ in kept] + [m.start() for m in title.finditer(text)])
        best: tuple[int, int] | None = None
        for match in title.finditer(text):
            later = [at for at in starts if at > match.start()]
            size = (later[0] if later else len(text)) - match.start()
            if size >= _MIN_CHARS.get(name, 0) and (best is None or size > best[1]):
                best = (match.start(), size)
        if best:
            found.append((best[0], name))
    return sorted(kept + found)


def _doubt(text: str, name: str, start: int, end: int) -> str | None:
    line_end = text.find("\n", start)
    next_end = text.find("\n", line_end + 1) if line_end != -1 else -1
    title = text[start : next_end if next_end != -1 else end][:300].lower().replace("\u2019", "'")
    words = _TITLE_WORDS.get(name)
    if words and not any(word in title for word in words):
        shown = " ".join(text[start : line_end if line_end != -1 else end].split())[:80]
        return f"its heading ({shown!r}) does not name what {name} is for"
    least = _MIN_CHARS.get(name)
    if (
        least
        and len(text) >= WHOLE_FILING_CHARS
        and end - start < least
        and not _EXPLAINED.search(text, start, end)
    ):
        return f"only {end - start:,} characters, and it does not say why (not applicable, see elsewhere)"
    return None


def split_by_section(
    text: str,
    chunk_tokens: int,
    overlap_tokens: int,
    found: list[Section] | None = None,
    count: Callable[[str], int] = estimate_tokens,
) -> list[ChunkSpan]:
    """Chunks that follow `found` (default: `find_sections(text)`) where they fit `chunk_tokens`;
    plain windows (`chunking.split`) for text without item headings. `count` gives each chunk's
    tokens."""
    found = find_sections(text) if found is None else found
    if not found:
        return split(text, chunk_tokens, overlap_tokens, count)
    size = chunk_tokens * CHARS_PER_TOKEN
    spans: list[ChunkSpan] = []
    group: list[Section] = []

    def close_group() -> None:
        if group:
            start, end = group[0].start, group[-1].end
            spans.append(ChunkSpan(len(spans), start, end, count(text[start:end]), _name(group)))
            group.clear()

    for section in found:
        if section.end - section.start > size:
            # Small sections before a long one open its first window instead of a tiny chunk.
            if group and group[-1].end - group[0].start > size // 5:
                close_group()
            first = [*group, section]
            start = first[0].start
            group.clear()
            for window in split(text[start : section.end], chunk_tokens, overlap_tokens, count):
                name = _name(first) if window.idx == 0 else section.name
                spans.append(
                    ChunkSpan(
                        len(spans),
                        start + window.char_start,
                        start + window.char_end,
                        window.token_estimate,
                        name,
                    )
                )
            continue
        if group and section.end - group[0].start > size:
            close_group()
        group.append(section)
    close_group()
    return spans


def _name(sections: list[Section]) -> str:
    """ "Item 7", "Item 7, Item 7A", or "Cover to Item 4" for longer runs, within the column."""
    if len(sections) > 2:
        return f"{sections[0].name} to {sections[-1].name}"[:SECTION_NAME_CHARS]
    return ", ".join(s.name for s in sections)[:SECTION_NAME_CHARS]


def _names_in(section: str) -> list[str]:
    """The section names a chunk's `section` column holds ("Item 7, Item 7A"; "Cover to Item 4"
    names its ends only)."""
    return _SECTION_NAME.findall(section)


def hint(chunk_text: str, section: str | None) -> str:
    """What the chunk holds and what to look for there, for the prompt: the sections the chunk
    was cut along, else the item headings in its text."""
    names = _names_in(section) if section else []
    if not names:
        names = [s.name for s in find_sections(chunk_text, check=False) if s.name != "Cover"]
    if not names:
        return ""
    wanted = [what for name, what in LOOK_FOR.items() if name in names]
    told = f"This part is from {', '.join(names)} of the filing."
    return f"{told} Look here especially for {'; '.join(dict.fromkeys(wanted))}." if wanted else told
