"""The limiter's clock: Redis TIME, plus a shift that is 0 but in tests.

Every limiter decision reads Redis's clock (TIME in the scripts, and in the limiter's own reads),
never a host's: hosts' clocks may be minutes apart. Each script takes the shift as its `shift_ms`
argument and adds it to TIME; tests move it (`moved`) instead of sleeping until a window passes,
a lease or a probe's claim runs out or a pause ends. The one host clock the limiter reads, how
long a process trusts a scope's "no limit" verdict, is read here too, so that the shift moves it
as well. The circuit breaker has the same seam (`pipeline.llm.circuit.moved`).
"""

from __future__ import annotations

import time
from typing import Any

from pipeline.core import replies
from pipeline.core.clock_shift import ClockShift

_shift = ClockShift()

moved = _shift.moved
"""Tests: while the block runs, this process's limiter sees the clock `seconds` later (a window
passes, a lease or a pause runs out) without waiting for it."""


def shift_ms() -> int:
    """What the scripts add to Redis TIME (ms): 0 outside tests."""
    return _shift.ms


def now_ms(redis_time: Any) -> int:
    """A TIME reply ([seconds, microseconds]) in ms, as the scripts see it."""
    return replies.time_ms(redis_time) + _shift.ms


def monotonic_s() -> float:
    """This process's `time.monotonic()`, moved with the rest."""
    return time.monotonic() + _shift.ms / 1000
