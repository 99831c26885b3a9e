"""Filing sections: 10-K/10-Q item headings, and chunks that follow them (pure).

A chunk is one or more whole sections when they fit the token budget (tiny sections are
merged with their neighbours), or a window of one long section (split with overlap, as
`chunking.split` does). Every character of the text lies in some chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.core.constants import CHARS_PER_TOKEN
from pipeline.ingest.chunking import ChunkSpan, estimate_tokens, split

SECTION_NAME_CHARS = 40
_HEADING = re.compile(
    r"^[ \t]*item[ \t]+(\d{1,2}[a-c]?)[ \t]*[.:\-\u2013\u2014]", re.IGNORECASE | re.MULTILINE
)
LOOK_FOR = {
    "Item 1A": "the risk factors",
    "Item 7": "total revenue and the fiscal year (management's discussion and analysis)",
    "Item 8": "total revenue and the fiscal year (financial statements)",
}
"""What a section is the place for, told to the model with the chunk."""


@dataclass(frozen=True)
class Section:
    name: str  # "Item 1A"; "Cover" before the first heading
    start: int
    end: int


def find_sections(text: str) -> list[Section]:
    """The text cut at item headings (at a line start), in order; [] when it has none."""
    starts = [(m.start(), f"Item {m.group(1).upper()}") for m in _HEADING.finditer(text)]
    if not starts:
        return []
    if starts[0][0] > 0:
        starts.insert(0, (0, "Cover"))
    ends = [s for s, _ in starts[1:]] + [len(text)]
    return [Section(name, start, end) for (start, name), end in zip(starts, ends, strict=True)]


def split_by_section(text: str, chunk_tokens: int, overlap_tokens: int) -> list[ChunkSpan]:
    """Chunks that follow section boundaries where they fit `chunk_tokens`; plain windows
    (`chunking.split`) for text without item headings."""
    found = find_sections(text)
    if not found:
        return split(text, chunk_tokens, overlap_tokens)
    size = chunk_tokens * CHARS_PER_TOKEN
    spans: list[ChunkSpan] = []
    group: list[Section] = []

    def close_group() -> None:
        if group:
            start, end = group[0].start, group[-1].end
            spans.append(ChunkSpan(len(spans), start, end, estimate_tokens(text[start:end]), _name(group)))
            group.clear()

    for section in found:
        if section.end - section.start > size:
            # Small sections before a long one open its first window instead of a tiny chunk.
            if group and group[-1].end - group[0].start > size // 5:
                close_group()
            first = [*group, section]
            start = first[0].start
            group.clear()
            for window in split(text[start : section.end], chunk_tokens, overlap_tokens):
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


def hint(chunk_text: str, section: str | None) -> str:
    """What the chunk holds and what to look for there, for the prompt: the item headings
    in the chunk's text, else the section it lies in."""
    names = [s.name for s in find_sections(chunk_text) if s.name != "Cover"] or ([section] if section else [])
    if not names:
        return ""
    wanted = [what for name, what in LOOK_FOR.items() if name in names]
    told = f"This part is from {', '.join(names)} of the filing."
    return f"{told} Look here especially for {'; '.join(dict.fromkeys(wanted))}." if wanted else told
