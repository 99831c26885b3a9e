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
from datetime import datetime, time, timedelta

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


LOOK_BACK_DAYS = 8 * 366
"""How far `latest_fire` looks back: far enough for a 29 February that falls on a given weekday."""


def expand(expression: str) -> tuple[frozenset[int], ...]:
    """Each field's values, as Celery's `crontab` expands them (its `minute`, `hour`,
    `day_of_month`, `month_of_year`, `day_of_week` sets); `expression` is one the check accepts."""
    return tuple(
        frozenset(value for part in text.lower().split(",") for value in _values(part, name, low, high))
        for text, (name, low, high) in zip(expression.split(), FIELDS, strict=True)
    )


def _values(part: str, name: str, low: int, high: int) -> list[int]:
    found = _PART.match(part)
    assert found is not None, f"{part!r} was not checked"
    if found["star"] is not None:
        values = list(range(low, high + 1))
    else:
        first = _number(found["first"], name)
        last = first if found["last"] is None else _number(found["last"], name)
        # A range past the field's end wraps (22-2: 22, 23, 0, 1, 2), as Celery's does.
        values = (
            list(range(first, last + 1))
            if last >= first
            else [*range(first, high + 1), *range(low, last + 1)]
        )
    return values[:: int(found["step"] or 1)]


def _number(value: str, name: str) -> int:
    if value.isdigit():
        return int(value)
    return NAMES[name].index(value[:3]) + (1 if name == "month" else 0)


def latest_fire(expression: str, now: datetime) -> datetime:
    """The latest minute at or before `now` (in `now`'s time zone) that `expression` schedules:
    the slot a fire at `now` belongs to, however late it comes. A day is scheduled when its day
    of month, month and weekday are all in the expression (Celery's rule, not cron's "or")."""
    minutes, hours, days, months, weekdays = expand(expression)
    at = now.replace(second=0, microsecond=0)
    for back in range(LOOK_BACK_DAYS):
        day = at.date() - timedelta(days=back)
        if day.month not in months or day.day not in days or day.isoweekday() % 7 not in weekdays:
            continue
        for hour in sorted((h for h in hours if back or h <= at.hour), reverse=True):
            last = at.minute if not back and hour == at.hour else 59
            if fitting := [m for m in minutes if m <= last]:
                return datetime.combine(day, time(hour, max(fitting)), tzinfo=now.tzinfo)
    raise ValueError(f"{expression!r} schedules nothing in the {LOOK_BACK_DAYS} days before {now}")
