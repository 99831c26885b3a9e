"""The client's side of the global limiter: what a call reserves, what it hands back, and the
shared pause after a 429.

Tokens are reserved as the prompt estimate (scaled by what the provider has been counting for
the model) plus `max_tokens`, and refunded from the answer's usage. The limiter's Redis failing
after an answer never throws the answer away: the lease expires by itself.
"""

from __future__ import annotations

import logging
import math
import random
import time

import redis

from pipeline.core import constants as c
from pipeline.core import errors
from pipeline.core.settings import Settings
from pipeline.llm.ratelimit import Permit, RedisLimiter, Scope, clock
from pipeline.llm.ratelimit.policy import ProviderLimits

log = logging.getLogger(__name__)
PROMPT_RATIO_WEIGHT = 0.1
"""Weight of the newest answer in the moving average of counted / estimated prompt tokens."""
PROMPT_RATIO_MARGIN = 1.05
PROMPT_RATIO_MAX = 2.0
UNCALIBRATED_HORIZON_S = 1.0
"""How far ahead a call reserves its send time before any answer calibrated the estimate."""


class Pacing:
    def __init__(self, limiter: RedisLimiter | None, settings: Settings, rng: random.Random) -> None:
        self.limiter = limiter
        self._settings = settings
        self._rng = rng
        self._warned_limits: set[tuple[str, int]] = set()
        self._prompt_ratio: dict[str, float] = {}
        """Per model: the provider's prompt tokens / our estimate, a moving average."""

    def tokens(self, model: str, estimate: int, max_tokens: int) -> int:
        """What a call reserves: the prompt estimate scaled by what the provider has been
        counting for this model (a reservation far above the charge holds back the window until
        its refund), plus `max_tokens`."""
        ratio = self._prompt_ratio.get(model)
        if ratio is None:
            return estimate + max_tokens
        return math.ceil(estimate * min(PROMPT_RATIO_MAX, ratio * PROMPT_RATIO_MARGIN)) + max_tokens

    def calibrate(self, model: str, estimate: int, counted: int) -> None:
        """Move the model's ratio towards what the provider counted for an `estimate`."""
        if estimate <= 0 or counted <= 0:
            return
        seen = counted / estimate
        ratio = self._prompt_ratio.get(model)
        self._prompt_ratio[model] = seen if ratio is None else ratio + PROMPT_RATIO_WEIGHT * (seen - ratio)

    def now_s(self) -> float:
        """The one clock, in epoch seconds: Redis TIME (the limiter's, moved with it in tests),
        which every worker reads alike however far its host's clock is off; this host's only
        without Redis (or when it does not answer: the call's own admission then fails)."""
        if self.limiter is None:
            return time.time()
        try:
            return clock.now_ms(self.limiter.client.time()) / 1000
        except redis.RedisError as exc:
            log.debug("Redis TIME unread, this host's clock instead: %s", exc)
            return time.time()

    def acquire(self, scopes: list[Scope], tokens: int, waited_s: float) -> Permit:
        if self.limiter is None:
            return Permit(self._rng.choice(scopes), "", tokens, 0.0)
        # Until an answer has calibrated this model's estimate, its cost is a guess (and errs
        # high): such calls reserve only a short way ahead.
        calibrated = scopes[0].model in self._prompt_ratio
        horizon = None if calibrated else UNCALIBRATED_HORIZON_S
        return self.limiter.acquire(scopes, tokens, waited_s=waited_s, horizon_s=horizon)

    def release(
        self, permit: Permit, limits: ProviderLimits | None, charged_tokens: int | None = None
    ) -> None:
        """End the permit and hand the limiter what the provider's headers said of its limits."""
        if limits is not None:
            self._warn_above_provider(limits)
        if self.limiter:
            try:
                moved = self.limiter.release(permit, limits, charged_tokens)
            except redis.RedisError as exc:
                # An answer the provider has given (and billed) is never thrown away for the
                # limiter's bookkeeping: the lease expires by itself, the refund is forgone.
                log.warning("the limiter could not record the end of a call: %s", exc)
                return
            if any(moved):
                log.info(
                    "the provider has less room than our window leaves: pacing moved %.2f s (requests) "
                    "and %.2f s (tokens) later",
                    *moved,
                )

    def pause(self, scope: Scope, error: errors.RateLimited) -> None:
        """After a 429, the shared pause, so that no worker sends into the refusal meanwhile. A
        burst refused while the window had room asks for a small cut, a spent quota (our limit
        is above the provider's) for a large one."""
        if self.limiter is None:
            return
        decrease = c.AIMD_DECREASE if error.quota_spent else c.AIMD_BURST_DECREASE
        self.limiter.pause(scope, error.retry_after_s or c.PAUSE_WITHOUT_RETRY_AFTER_S, decrease=decrease)

    def _warn_above_provider(self, limits: ProviderLimits) -> None:
        """A configured limit above the provider's own figure: the provider's is used."""
        for kind, configured, stated in (
            ("PIPELINE_RATE_LIMIT_RPM", self._settings.rate_limit_rpm, limits.limit_requests),
            ("PIPELINE_RATE_LIMIT_TPM", self._settings.rate_limit_tpm, limits.limit_tokens),
        ):
            if stated and configured > stated and (kind, stated) not in self._warned_limits:
                self._warned_limits.add((kind, stated))
                log.warning(
                    "%s=%d is above the provider's own limit (%d, from its x-ratelimit headers): "
                    "using the provider's",
                    kind,
                    configured,
                    stated,
                )
