"""A crontab expression (PIPELINE_INBOX_SCHEDULE) checked as beat's scheduler will read it (pure).

Celery's `crontab`, which `pipeline beat` builds from the setting, refuses a value outside its
field's range only when beat starts, and then as a bare ValueError (the CLI's "internal error",
exit 70). Checked here, with the settings, every command names the setting and the field
instead (exit 2). What this accepts, Celery accepts (tests/test_schedule.py compares the two):
per field a comma-separated list of `*`, `N`, `A-B` (wrapping past the field's end, as
Celery's does), `*/S` or `A-B/S`; month and weekday names (`jan`, `mon`, their first three
letters) in those two fields only.
"""

from __future__ import annotations

import re

FIELDS: tuple[tuple[str, int, int], ...] = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("weekday", 0, 6),
)
"""Each field's name and range, in the expression's order (Celery's: Sunday is 0, and 7 is refused)."""

NAMES: dict[str, tuple[str, ...]] = {
    "month": ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    "weekday": ("sun", "mon", "tue", "wed", "thu", "fri", "sat"),
}

_PART = re.compile(r"^(?:(?P<star>\*)|(?P<first>[a-z0-9]+)(?:-(?P<last>[a-z0-9]+))?)(?:/(?P<step>\d+))?$")


def crontab_problem(expression: str) -> str | None:
    """Why `expression` is not a five-field crontab expression beat can schedule; None if it is."""
    fields = expression.split()
    if len(fields) != len(FIELDS):
        return f"{expression!r} is not a crontab expression of five fields (minute hour day month weekday)"
    for text, (name, low, high) in zip(fields, FIELDS, strict=True):
        for part in text.split(","):
            if problem := _part_problem(part.lower(), name, low, high):
                return f"{expression!r}: {name} {part!r} {problem}"
    return None


def _part_problem(part: str, name: str, low: int, high: int) -> str | None:
    found = _PART.match(part)
    if found is None:
        return "is not *, a number, a range (a-b) or a step (*/n, a-b/n)"
    if found["step"] is not None:
        if int(found["step"]) == 0:
            return "has a step of 0"
        if found["star"] is None and found["last"] is None:
            return "has a step without a range: write it as *" + part[part.index("/") :]
    for value in (found["first"], found["last"]):
        if value is not None and (problem := _value_problem(value, name, low, high)):
            return problem
    return None


def _value_problem(value: str, name: str, low: int, high: int) -> str | None:
    if value.isdigit():
        number = int(value)
    elif value[:3] in NAMES.get(name, ()):
        number = NAMES[name].index(value[:3]) + (1 if name == "month" else 0)
    else:
        return f"is not a number from {low} to {high}"
    if not low <= number <= high:
        sunday = " (Sunday is 0)" if name == "weekday" else ""
        return f"is not from {low} to {high}{sunday}"
    return None
