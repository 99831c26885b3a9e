"""Prometheus metrics of the LLM endpoints' circuit breakers, served on Flower's `/metrics`.

Flower's own metrics know tasks and workers only: a provider's outage shows there as tasks that
stop succeeding, not as the outage. `pipeline flower` registers `CircuitCollector` in the
registry Flower's `/metrics` serves (prometheus_client's default), and each scrape reads every
endpoint's circuit from Redis (`pipeline.llm.circuit.states`): whether it is open, for how long,
its failed probes, and the calls it held. It needs the Redis the limiter uses (the broker's,
unless PIPELINE_LIMITER_REDIS_URL says otherwise) and nothing else: no database, no API key.

A scrape never fails for Redis: `pipeline_circuit_redis_up` says 0, with the error in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.llm import circuit
from pipeline.llm.circuit import CircuitState

log = logging.getLogger(__name__)
SCRAPE_TIMEOUT_S = 2.0
"""Each Redis command of a scrape waits this long at most (Prometheus's own timeout is 10 s)."""


Series = tuple[type[GaugeMetricFamily] | type[CounterMetricFamily], str, str, Callable[[CircuitState], float]]
SERIES: tuple[Series, ...] = (
    (
        GaugeMetricFamily,
        "open",
        "1 while the endpoint's circuit is open (or probing)",
        lambda s: s.state != "closed",
    ),
    (GaugeMetricFamily, "open_seconds", "How long the current outage has lasted", lambda s: s.open_for_s),
    (GaugeMetricFamily, "failed_probes", "Probes failed in the current outage", lambda s: s.probes),
    (
        GaugeMetricFamily,
        "consecutive_failures",
        "Consecutive failed calls while closed (PIPELINE_CIRCUIT_FAILURES opens it)",
        lambda s: s.failures,
    ),
    (
        GaugeMetricFamily,
        "last_outage_seconds",
        "How long the last outage that ended lasted",
        lambda s: s.last_outage_s or 0.0,
    ),
    (CounterMetricFamily, "outages", "Times the circuit opened", lambda s: s.outages),
    (CounterMetricFamily, "held_calls", "Calls the open circuit held, never sent", lambda s: s.held_calls),
    (CounterMetricFamily, "held_seconds", "Time the held calls waited, in all", lambda s: s.held_s),
)
"""Each metric `pipeline_llm_circuit_<name>` (counters get `_total`), by endpoint: its kind, help
and value."""


class CircuitCollector(Collector):
    """Reads every endpoint's circuit at each scrape; one label, `endpoint` (no credentials)."""

    def __init__(self, redis_url: str) -> None:
        self._client = redis.Redis.from_url(
            redis_url, socket_timeout=SCRAPE_TIMEOUT_S, socket_connect_timeout=SCRAPE_TIMEOUT_S
        )

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "pipeline_circuit_redis_up", "1 when the circuits' Redis answered this scrape, else 0"
        )
        try:
            found = circuit.states(self._client)
        except redis.RedisError as exc:
            log.warning("circuit metrics: Redis did not answer (%s)", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        for kind, name, help_text, value in SERIES:
            family = kind(f"pipeline_llm_circuit_{name}", help_text, labels=["endpoint"])
            for state in found:
                family.add_metric([state.endpoint], float(value(state)))
            yield family


def register(redis_url: str) -> None:
    """Serve the circuits' metrics on this process's `/metrics` (Flower's)."""
    from prometheus_client import REGISTRY

    REGISTRY.register(CircuitCollector(redis_url))
