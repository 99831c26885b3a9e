"""Pure fault and latency draws, one per admitted request, from the seeded RNG."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from pipeline_dev.sim.config import SimConfig

Outcome = Literal["ok", "error", "drop", "hang"]
ERROR_STATUSES = (500, 502, 503)
_Z95 = 1.6449  # the standard normal's 95th percentile


@dataclass(frozen=True)
class Draw:
    """What happens to one admitted request, decided before its answer is sent."""

    outcome: Outcome
    error_status: int  # used when outcome == "error"
    bad_json: bool
    truncate: bool
    truncate_fraction: float  # share of the content kept when truncated
    latency_s: float


def latency(rng: random.Random, p50_s: float, p95_s: float) -> float:
    """A log-normal latency with median `p50_s` and 95th percentile `p95_s`.

    Constant `p50_s` when `p95_s <= p50_s`; 0 when `p50_s` is 0.
    """
    z = rng.gauss(0.0, 1.0)  # always drawn, so the RNG sequence does not depend on config
    if p50_s <= 0:
        return 0.0
    if p95_s <= p50_s:
        return p50_s
    sigma = math.log(p95_s / p50_s) / _Z95
    return p50_s * math.exp(sigma * z)


def draw(rng: random.Random, config: SimConfig) -> Draw:
    """The fault draw for one request. The same number of draws is made every time, so
    a seeded run gives the same sequence of outcomes whatever the requests contain.

    error, drop and hang split one uniform draw, so their rates are exact shares.
    """
    u_outcome, u_status, u_bad, u_trunc, u_frac = (rng.random() for _ in range(5))
    outcome: Outcome = "ok"
    if u_outcome < config.error_rate:
        outcome = "error"
    elif u_outcome < config.error_rate + config.drop_rate:
        outcome = "drop"
    elif u_outcome < config.error_rate + config.drop_rate + config.hang_rate:
        outcome = "hang"
    return Draw(
        outcome=outcome,
        error_status=ERROR_STATUSES[int(u_status * len(ERROR_STATUSES)) % len(ERROR_STATUSES)],
        bad_json=u_bad < config.bad_json_rate,
        truncate=u_trunc < config.truncate_rate,
        truncate_fraction=0.3 + 0.5 * u_frac,
        latency_s=latency(rng, config.p50_s, config.p95_s),
    )
