"""The limiter's Lua scripts on the Python side: each one's KEYS, ARGV and reply, by name.

Each script opens with the same contract (KEYS[i], ARGV[i], the reply). A dataclass's fields are
in the script's order: `.keys()` / `.args()` give the lists the script reads by position, so no
other code does. Replies are parsed into dataclasses here, with `pipeline.core.replies`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any, TypeVar

import redis

from pipeline.core import keys as redis_keys
from pipeline.core import replies
from pipeline.llm.ratelimit.policy import ProviderLimits

_T = TypeVar("_T")


class InScriptOrder:
    """A dataclass whose fields are listed in the order the script reads them (the circuit's
    scripts use it too: `pipeline.llm.circuit_scripts`)."""

    def _values(self) -> list[Any]:
        return [getattr(self, f.name) for f in fields(self)]  # type: ignore[arg-type]


class _Keys(InScriptOrder):
    def keys(self) -> list[str]:
        return self._values()

    @classmethod
    def of(cls: type[_T], scope: ScopeKeys) -> _T:
        """The scope's keys this script takes, picked by name."""
        return cls(**{f.name: getattr(scope, f.name) for f in fields(cls)})  # type: ignore[arg-type]


class ScriptArgs(InScriptOrder):
    def args(self) -> list[int | float | str]:
        return self._values()


@dataclass(frozen=True)
class ScopeKeys:
    """Every Redis key of a scope: one prefix, and a hash tag so a cluster keeps them together."""

    log: str
    """ZSET permit id -> send time (ms)"""
    costs: str
    """HASH permit id -> tokens reserved"""
    tokens: str
    """STRING the sum of the costs in the window"""
    inflight: str
    """ZSET permit id -> lease expiry (ms)"""
    pause: str
    """STRING "pause until" (ms), after a 429"""
    aimd: str
    """HASH factor, cut_at (ms)"""
    pace: str
    """HASH requests, tokens: the GCRAs' theoretical arrival times (ms)"""
    learned: str
    """HASH rpm, tpm, seen, probe: what the provider's headers said"""
    retired: str
    """ZSET permit id -> send time, of admissions that left the window"""

    @classmethod
    def of(cls, tag: str) -> ScopeKeys:
        return cls(**{f.name: redis_keys.LIMITER.of(f"{{{tag}}}:{f.name}") for f in fields(cls)})

    def all(self) -> list[str]:
        return [getattr(self, f.name) for f in fields(self)]


# --- acquire.lua ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AcquireKeys(_Keys):
    log: str
    costs: str
    tokens: str
    inflight: str
    pause: str
    aimd: str
    pace: str
    learned: str
    retired: str


@dataclass(frozen=True)
class AcquireArgs(ScriptArgs):
    rpm: int
    """configured (0: none)"""
    tpm: int
    max_inflight: int
    cost: int
    """tokens the call reserves"""
    permit_id: str
    window_ms: int
    lease_ms: int
    recovery_ms: int
    """from a cut back to factor 1"""
    ttl_extra_ms: int
    """how long the keys outlive the window"""
    burst_ms: int
    """quota that may go at once; -1: no pacing, the window alone"""
    max_wait_ms: int
    """a later send time is refused, not reserved"""
    learn: int
    """1: the provider's limits set or lower ours, and a probe goes first"""
    probe_ms: int
    keep_ms: int
    """how long admissions that left the window stay in `retired`"""
    shift_ms: int
    """added to Redis TIME: 0 outside tests, which move the clock instead of sleeping
    (`pipeline.llm.ratelimit.clock`)"""


@dataclass(frozen=True)
class Decision:
    """acquire.lua's reply."""

    admitted: bool
    wait_s: float
    """Admitted: how long until the reserved send time. Refused: when to ask again."""
    reason: str
    requests_in_window: int
    tokens_in_window: int
    factor: float
    at_ms: int
    """Redis time of the decision."""
    rpm: int = 0
    tpm: int = 0
    """The limits in force: configured, learned from the provider, or the lower of the two."""
    heard: bool = False
    """An answer has told what the provider's limits are (or that it states none)."""

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Decision:
        admitted, wait_ms, reason, requests, used, factor, at_ms, rpm, tpm, heard = reply
        return cls(
            admitted=replies.flag(admitted),
            wait_s=replies.integer(wait_ms) / 1000,
            reason=replies.text(reason),
            requests_in_window=replies.integer(requests),
            tokens_in_window=replies.integer(used),
            factor=replies.millionths(factor),
            at_ms=replies.integer(at_ms),
            rpm=replies.integer(rpm),
            tpm=replies.integer(tpm),
            heard=replies.flag(heard),
        )


# --- release.lua ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseKeys(_Keys):
    log: str
    inflight: str
    pace: str
    learned: str
    aimd: str
    costs: str
    tokens: str
    retired: str


@dataclass(frozen=True)
class ReleaseArgs(ScriptArgs):
    permit_id: str
    window_ms: int
    recovery_ms: int
    rpm: int
    tpm: int
    limit_requests: int
    """x-ratelimit-limit-requests (this and the five after it: -1 when the header was absent)"""
    remaining_requests: int
    reset_requests_ms: int
    limit_tokens: int
    remaining_tokens: int
    reset_tokens_ms: int
    answered: int
    """1: the provider answered; 0: no answer came back; -1: never sent (leaves the window)"""
    learned_ttl_ms: int
    charged_tokens: int
    """what the provider charged (-1: unknown, the reservation stands)"""
    learn: int
    shift_ms: int
    """added to Redis TIME: 0 outside tests, which move the clock instead of sleeping
    (`pipeline.llm.ratelimit.clock`)"""

    @staticmethod
    def headers(told: ProviderLimits) -> dict[str, int]:
        """The six header fields: -1 for an absent header, times in ms."""

        def number(value: int | None) -> int:
            return -1 if value is None else value

        def millis(value: float | None) -> int:
            return -1 if value is None else math.ceil(value * 1000)

        return {
            "limit_requests": number(told.limit_requests),
            "remaining_requests": number(told.remaining_requests),
            "reset_requests_ms": millis(told.reset_requests_s),
            "limit_tokens": number(told.limit_tokens),
            "remaining_tokens": number(told.remaining_tokens),
            "reset_tokens_ms": millis(told.reset_tokens_s),
        }


@dataclass(frozen=True)
class Pushed:
    """release.lua's reply: how much later the pacing moved (s), and the factor after."""

    requests_s: float
    tokens_s: float
    factor: float
    """-1 when the answer was not taken in (none came back, or the call was never sent)."""

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Pushed:
        requests_ms, tokens_ms, factor = reply
        return cls(
            replies.integer(requests_ms) / 1000, replies.integer(tokens_ms) / 1000, replies.millionths(factor)
        )


# --- pause.lua --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PauseKeys(_Keys):
    pause: str
    aimd: str


@dataclass(frozen=True)
class PauseArgs(ScriptArgs):
    pause_ms: int
    decrease: float
    """multiplier of the factor (1: no cut)"""
    min_factor: float
    recovery_ms: int
    cooldown_ms: int
    """a cut within this of the previous one is skipped: one burst of 429s is one event"""
    ttl_ms: int
    shift_ms: int
    """added to Redis TIME: 0 outside tests, which move the clock instead of sleeping
    (`pipeline.llm.ratelimit.clock`)"""


@dataclass(frozen=True)
class Paused:
    """pause.lua's reply."""

    until_s: float
    """unix s"""
    factor: float

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Paused:
        until_ms, factor = reply
        return cls(replies.integer(until_ms) / 1000, replies.millionths(factor))


class Scripts:
    """The three scripts, registered once on a client; each call takes its dataclasses."""

    def __init__(self, client: redis.Redis) -> None:
        self._acquire = client.register_script(source("acquire.lua"))
        self._release = client.register_script(source("release.lua"))
        self._pause = client.register_script(source("pause.lua"))

    def acquire(self, keys: AcquireKeys, args: AcquireArgs) -> Decision:
        return Decision.from_reply(self._acquire(keys=keys.keys(), args=args.args()))

    def release(self, keys: ReleaseKeys, args: ReleaseArgs) -> Pushed:
        return Pushed.from_reply(self._release(keys=keys.keys(), args=args.args()))

    def pause(self, keys: PauseKeys, args: PauseArgs) -> Paused:
        return Paused.from_reply(self._pause(keys=keys.keys(), args=args.args()))


def source(name: str) -> str:
    return resources.files("pipeline.llm.ratelimit").joinpath(name).read_text(encoding="utf-8")
