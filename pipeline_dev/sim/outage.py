"""The outage fault: for a while, every chat completion is refused, as a provider that is down.

A provider's outage, in OpenAI's words (its error-codes guide): `503 The engine is currently
overloaded, please try again later` or `500 The server had an error while processing your
request`; or no HTTP answer at all (`reset`: the connection is dropped, as a load balancer with no
healthy backend does, which the SDK raises as APIConnectionError). Refusals come before anything
else (a down provider does not read the request, count it against a quota or check the key), and
carry no rate-limit headers.

Started from the command line (`pipeline sim --outage-after S --outage-for S`), or while the
simulator runs with POST /sim/outage {"seconds": N, "kind": "503"} (`seconds` 0 ends it). Each
outage's window and the requests refused in it are kept (GET /sim/stats, "outage"), so that a test
counts what reached the provider while it was down from the provider's side.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Kind = Literal["503", "500", "reset"]
KINDS: tuple[Kind, ...] = ("503", "500", "reset")
MESSAGES = {
    "503": "The engine is currently overloaded, please try again later.",
    "500": "The server had an error while processing your request. Sorry about that!",
}


def kind_of(text: str) -> Kind:
    """`text` as an outage kind; ValueError naming the kinds otherwise."""
    for kind in KINDS:
        if text == kind:
            return kind
    raise ValueError(f"outage kind must be one of {', '.join(KINDS)}, got {text!r}")


@dataclass
class Window:
    """One outage: when it began and ends (unix seconds), and what it refused."""

    kind: Kind
    started_at: float
    ends_at: float
    refused: int = 0
    refused_at: list[float] = field(default_factory=list)
    """Unix seconds of each refused request."""


@dataclass
class Outages:
    """Every outage of this simulator, the current one last."""

    windows: list[Window] = field(default_factory=list)

    def start(self, seconds: float, kind: Kind = "503", now: float | None = None) -> Window | None:
        """An outage from `now` for `seconds` (0: the current one ends now); the new window."""
        moment = time.time() if now is None else now
        current = self.current(moment)
        if current is not None:
            current.ends_at = moment
        if seconds <= 0:
            return None
        window = Window(kind, moment, moment + seconds)
        self.windows.append(window)
        return window

    def schedule(self, after_s: float, seconds: float, kind: Kind = "503") -> Window | None:
        """An outage that begins `after_s` from now (the command line's)."""
        return self.start(seconds, kind, now=time.time() + after_s)

    def current(self, now: float | None = None) -> Window | None:
        moment = time.time() if now is None else now
        if self.windows and self.windows[-1].started_at <= moment < self.windows[-1].ends_at:
            return self.windows[-1]
        return None

    def refuse(self, now: float | None = None) -> Window | None:
        """The outage that refuses a request arriving now (counted in it), or None."""
        moment = time.time() if now is None else now
        window = self.current(moment)
        if window is not None:
            window.refused += 1
            window.refused_at.append(moment)
        return window

    def stats(self, now: float | None = None) -> dict[str, Any]:
        moment = time.time() if now is None else now
        current = self.current(moment)
        return {
            "active": current is not None,
            "kind": current.kind if current else None,
            "ends_in_s": round(current.ends_at - moment, 3) if current else 0.0,
            "refused": sum(w.refused for w in self.windows),
            "windows": [{**asdict(w), "ended": w.ends_at <= moment} for w in self.windows],
        }

    def reset(self) -> None:
        self.windows.clear()
