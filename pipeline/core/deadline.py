"""A run's deadline as the user writes it: a time of day or an ISO 8601 timestamp."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, time, timedelta

_TIME_OF_DAY = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")


def parse_deadline(text: str, now: datetime | None = None) -> datetime:
    """The deadline `text` names, as an aware datetime.

    "06:00" (or "06:00:30") is the next such time of day in the machine's local time zone: later
    today, or tomorrow once it has passed. An ISO timestamp ("2026-12-02T06:00", "...+01:00",
    "...Z") is taken as written, in local time when it names no zone. Raises ValueError saying
    what is accepted."""
    value = text.strip()
    now = (now or datetime.now(UTC)).astimezone()
    if match := _TIME_OF_DAY.match(value):
        hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise ValueError(f"deadline {text!r}: no such time of day")
        # Naive, then local: the zone's offset of that day (a DST change between today and
        # tomorrow is taken into account), not today's.
        moment = datetime.combine(now.date(), time(hour, minute, second)).astimezone()
        if moment <= now:
            moment = datetime.combine(now.date() + timedelta(days=1), time(hour, minute, second)).astimezone()
        return moment
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"deadline {text!r} is neither a time of day (06:00) nor an ISO timestamp (2026-12-02T06:00+00:00)"
        ) from None
    return moment if moment.tzinfo else moment.astimezone()


def fixed_deadline(text: str, now: datetime, source: str, clock: str = "the database's clock") -> datetime:
    """The instant `text` names, fixed once at a command's start: `now` is the one clock's (the
    database's; `clock` says whose), and a time of day is the next one after it, whatever happens
    later (storing the files may take past it). Raises ConfigError naming `source` (`--deadline`,
    PIPELINE_RUN_DEADLINE) when the instant is already past: a run planned against it would go at
    the standard tier, with no outage waited out, and nothing would say why."""
    from pipeline.core.errors import ConfigError  # settings imports this module: errors' redaction, settings

    moment = parse_deadline(text, now)
    if moment <= now:
        raise ConfigError(
            f"{source} {text.strip()} is already past (it is {_when(now)} by {clock}): "
            f"give a later time, a time of day such as 06:00 (the next one), or leave {source} out"
        )
    return moment


def _when(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def format_duration(seconds: float) -> str:
    """`seconds` rounded up, as 1h05m, 4m10s or 12s."""
    seconds = max(0, math.ceil(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_time(moment: datetime) -> str:
    """`moment` as the local time of day, to the second (05:41:07)."""
    return moment.astimezone().strftime("%H:%M:%S")
