"""A shift added to Redis's clock by one subsystem's decisions: 0 but in tests.

The limiter and the circuit breaker decide on Redis TIME (hosts' clocks may be minutes apart),
so their tests cannot set a host's clock: each holds a `ClockShift` that its scripts add to TIME,
and tests move it (`moved`) instead of sleeping until a window passes or a lease runs out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class ClockShift:
    """How far this process's decisions of one subsystem see the clock moved, in ms."""

    def __init__(self) -> None:
        self.ms = 0

    @contextmanager
    def moved(self, seconds: float) -> Iterator[None]:
        """While the block runs, decisions see the clock `seconds` later (nested moves add up).
        Other processes are not moved, nor are Redis's key TTLs."""
        before = self.ms
        self.ms = before + int(seconds * 1000)
        try:
            yield
        finally:
            self.ms = before
