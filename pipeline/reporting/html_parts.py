"""Building blocks of the HTML report (pure): escaping by default, tables, a custom schema's cells.

Every value is escaped unless it is `Html` (markup this package built, holding only escaped
text), so a string from a filing or a model can only ever be text: no element, attribute or
link comes from data, and no href is written at all.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

CELL_CHARS = 400
"""A custom schema's cell is cut to this many characters (the database has the rest)."""


class Html(str):
    """Markup that is safe as it is: built here from escaped text."""

    __slots__ = ()


def text(value: object) -> Html:
    """`value` as HTML text: `<`, `>`, `&` and both quotes escaped (safe in quoted attributes too)."""
    return Html("" if value is None else html.escape(str(value), quote=True))


def join(parts: Iterable[str]) -> Html:
    return Html("".join(p if isinstance(p, Html) else text(p) for p in parts))


def tag(name: str, content: object = "", cls: str = "") -> Html:
    """`<name class=cls>content</name>`; `name` and `cls` are this package's constants."""
    body = content if isinstance(content, Html) else text(content)
    attrs = f' class="{cls}"' if cls else ""
    return Html(f"<{name}{attrs}>{body}</{name}>")


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], cls: str = "") -> Html:
    """A table; a cell is escaped unless it is Html; numbers are aligned right, and whole
    numbers have thousands separators (pass a year as text)."""
    head = join(tag("th", h) for h in headers)
    body = []
    for row in rows:
        cells = [
            tag(
                "td",
                f"{cell:,}" if type(cell) is int else cell,
                "num" if isinstance(cell, int | float) else "",
            )
            for cell in row
        ]
        body.append(tag("tr", join(cells)))
    return tag("table", join([tag("thead", tag("tr", head)), tag("tbody", join(body))]), cls)


def section(anchor: str, title: str, *content: str) -> Html:
    """`<section id=anchor>` with a heading; `anchor` is this package's constant."""
    return Html(f'<section id="{anchor}">{tag("h2", title)}{join(content)}</section>')


def note(content: object) -> Html:
    return tag("p", content, "note")


def figure(svg: str, caption: str) -> Html:
    """A chart from `pipeline.reporting.charts` (its text escaped by matplotlib) and a caption."""
    return Html(f'<figure class="chart">{svg}{tag("figcaption", caption)}</figure>')


def ungrounded_paths(data: dict[str, Any], key: str) -> set[str]:
    return {str(c["path"]) for c in data.get(key, []) if not c.get("grounded")}


def custom_cell(value: Any, path: str, unverified: set[str]) -> Html:
    """A custom schema's field as short text; a value or item whose quote was not found in the
    filing is marked unverified. Quotes inside items are left out (the database has them)."""
    plain = _plain(value, path, unverified)
    if len(plain) > CELL_CHARS:
        plain = plain[: CELL_CHARS - 1] + "…"
    return text(plain)


def _touches(path: str, unverified: set[str]) -> bool:
    return any(p == path or p.startswith((path + ".", path + "[")) for p in unverified)


def _plain(value: Any, path: str, unverified: set[str]) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        parts = [
            f"{key}: {_plain(item, f'{path}.{key}', unverified)}"
            for key, item in value.items()
            if "quote" not in key.lower() and item not in (None, "", [], {})
        ]
        return ", ".join(parts)
    if isinstance(value, list):
        items = []
        for index, item in enumerate(value):
            where = f"{path}[{index}]"
            shown = _plain(item, where, unverified) or "(an item)"
            items.append(shown + (" (unverified)" if _touches(where, unverified) else ""))
        return "; ".join(items)
    shown = " ".join(str(value).split())
    return shown + (" (unverified)" if path in unverified else "")
