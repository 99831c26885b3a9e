"""Traces: one OpenTelemetry trace per document, from its submit through each delivery's extract
task and each LLM call to the closing write. Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; then spans go to that collector over OTLP/HTTP,
configured by the standard `OTEL_*` variables (`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`,
…).

The document's trace is carried by the document itself, not by a message: submit stores its
span's W3C `traceparent` on the document row (`documents.trace_parent`), and every delivery
(the run's chord, a retry, a reclaim, a resume, `pipeline retry`) opens its extract span under
it. So a document's trace holds every attempt made on it, whichever worker made it.

Spans carry ids, counts, models and statuses; never a filing's text, a prompt, an answer or a key.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER_NAME = "pipeline"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_propagator = TraceContextTextMapPropagator()
_installed = False


def wanted() -> bool:
    """Whether an OTLP endpoint is configured (and `OTEL_SDK_DISABLED` does not say no)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(os.environ.get(name) for name in _ENDPOINTS)


def setup(service: str) -> bool:
    """Install the OTLP exporter for this process when an endpoint is configured (once);
    whether traces are on. A provider installed before (a test's in-memory one) is kept."""
    global _installed
    if _installed or not wanted():
        return on()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _installed = True
    return True


def on() -> bool:
    """Whether spans are recorded in this process (an SDK provider is installed)."""
    from opentelemetry.sdk.trace import TracerProvider

    return isinstance(trace.get_tracer_provider(), TracerProvider)


def flush() -> None:
    """Send what is buffered (a short-lived command before it exits)."""
    provider: Any = trace.get_tracer_provider()
    if hasattr(provider, "force_flush"):
        provider.force_flush()


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


def traceparent(span: Span) -> str | None:
    """The span's W3C traceparent (None when it records nothing)."""
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def start(name: str, attributes: dict[str, Any] | None = None) -> Span:
    """A span named `name` under the current one, not made current: its caller ends it (a
    batch's spans, open until the batch is stored; `failed` when it is not)."""
    clean = {key: value for key, value in (attributes or {}).items() if value is not None}
    return tracer().start_span(name, attributes=clean, record_exception=False, set_status_on_exception=False)


def failed(current: Span, exc: BaseException) -> None:
    """The span ends in error, naming the exception's type, not its text (it may quote what it was sent)."""
    current.set_status(Status(StatusCode.ERROR, type(exc).__name__))


@contextmanager
def span(name: str, attributes: dict[str, Any] | None = None, parent: str | None = None) -> Iterator[Span]:
    """A span named `name`, current while the block runs: under the span of the W3C
    `parent` when given (a document's stored traceparent), else under the current one. An
    exception ends it with an error status naming the exception's type, not its text (and
    goes on)."""
    under = _propagator.extract({"traceparent": parent}) if parent else None
    clean = {key: value for key, value in (attributes or {}).items() if value is not None}
    with tracer().start_as_current_span(
        name, context=under, attributes=clean, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            failed(current, exc)
            raise


def mark_error(current: Span, reason: str) -> None:
    current.set_status(Status(StatusCode.ERROR, reason))
