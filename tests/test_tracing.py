"""Traces: one trace per document, from its submit through each delivery's extract span and each
LLM call to the closing write, recorded by the SDK's in-memory exporter; off by default; and
across processes (a real `pipeline submit` and a real worker) to an OTLP/HTTP collector."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr
from sqlalchemy import Engine, select

from pipeline.context import Context
from pipeline.core.settings import get_settings
from pipeline.extraction import extract as extracting
from pipeline.ingest.producer import prepare_run
from pipeline.llm.client import LLMClient
from pipeline.storage.db import session_scope
from pipeline.storage.models import Document
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.synth_filings import write_filings
from tests.conftest import claimed_redis_db, eventually, run_cli, running_workers

KEY = "sk-trace-canary-0123456789abcdef"


def _by_trace(spans: tuple[ReadableSpan, ...]) -> dict[int, list[ReadableSpan]]:
    traces: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        traces[span.context.trace_id].append(span)
    return traces


def test_each_document_is_one_trace_from_submit_to_its_closing_write(
    exporter: InMemorySpanExporter, engine: Engine, tmp_path: Path
) -> None:
    write_filings(tmp_path, 2, seed=29, sizes=[30_000, 30_000])
    exporter.clear()
    plan = prepare_run(engine, get_settings(), [str(tmp_path)])
    with SimServer(SimConfig(p50_s=0, p95_s=0, api_key=KEY)) as sim:
        settings = get_settings().model_copy(
            update={"llm_base_url": sim.base_url, "llm_api_key": SecretStr(KEY)}
        )
        ctx = Context(settings, engine, LLMClient(settings, pool_size=2))
        try:
            for document_id in plan.document_ids:
                assert extracting.extract_document(ctx, document_id) == "extracted"
                extracting.extract_document(ctx, document_id)  # a duplicate delivery: nothing new
        finally:
            ctx.llm.close()
    with session_scope(engine) as session:
        rows = session.execute(
            select(Document.id, Document.trace_parent).where(Document.run_id == plan.run_id)
        )
        parents = dict(list(rows.tuples()))  # dict(result) would read the Result as a mapping
    traces = _by_trace(exporter.get_finished_spans())
    assert len(traces) == len(plan.document_ids), [s.name for s in exporter.get_finished_spans()]
    for spans in traces.values():
        named = defaultdict(list)
        for span in spans:
            named[span.name].append(span)
        (submit,) = named["submit document"]
        (extract,) = named["extract document"]
        (store,) = named["store extraction"]
        calls = named["llm.call"]
        assert submit.parent is None, "the submit span is the trace's root"
        document_id = submit.attributes["document.id"] if submit.attributes else None
        stored = str(parents[int(str(document_id))]).split("-")
        assert stored[1:3] == [f"{submit.context.trace_id:032x}", f"{submit.context.span_id:016x}"]
        assert extract.parent is not None and extract.parent.span_id == submit.context.span_id
        assert extract.attributes and extract.attributes["document.status"] == "extracted"
        assert calls and all(
            c.parent is not None and c.parent.span_id == extract.context.span_id for c in calls
        )
        assert all(c.attributes and c.attributes["llm.status"] == "ok" for c in calls)
        assert store.parent is not None and store.parent.span_id == extract.context.span_id
        said = " ".join(str(v) for s in spans for v in (s.attributes or {}).values())
        assert KEY not in said and "Item 7" not in said, "no key, no filing text in a span"


def test_traces_are_off_unless_an_otlp_endpoint_is_set() -> None:
    probe = "from pipeline.core import tracing; print(tracing.setup('probe'), tracing.on())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    off = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert off.stdout.split() == ["False", "False"]
    on = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    made = subprocess.run([sys.executable, "-c", probe], env=on, capture_output=True, text=True, check=True)
    assert made.stdout.split() == ["True", "True"]


class Collector:
    """An OTLP/HTTP trace receiver on loopback: the spans every process exported to it."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.spans: list[dict[str, Any]] = []
        received = self.spans

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    service = next(
                        (
                            a.value.string_value
                            for a in resource.resource.attributes
                            if a.key == "service.name"
                        ),
                        "",
                    )
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            received.append(
                                {
                                    "service": service,
                                    "name": span.name,
                                    "trace": span.trace_id.hex(),
                                    "id": span.span_id.hex(),
                                    "parent": span.parent_span_id.hex(),
                                }
                            )
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def collector() -> Iterator[Collector]:
    made = Collector()
    yield made
    made.server.shutdown()


def test_a_documents_trace_spans_the_submit_and_the_worker_processes(
    pipeline_env: dict[str, str],
    redis_base: str,
    collector: Collector,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The submit process stores each document's traceparent; a worker process, another host
    as far as traces know, opens its extract span under it: one trace per document, two
    services."""
    write_filings(tmp_path, 2, seed=31, sizes=[25_000, 25_000])
    logs = tmp_path_factory.mktemp("traced-worker")
    with claimed_redis_db(redis_base) as broker:  # no other worker of the session takes its tasks
        env = {
            **pipeline_env,
            "PIPELINE_REDIS_URL": broker,
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_BSP_SCHEDULE_DELAY": "200",  # the worker's spans go out within 0.2 s
        }
        with running_workers(env, logs, 1):
            submitted = run_cli("submit", str(tmp_path), "--wait", "--fresh", env=env)
            assert submitted.returncode == 0, submitted.stderr
            eventually("two whole traces", lambda: len(_whole_traces(collector)) == 2, 30)
    by_id = {span["id"]: span for span in collector.spans}
    extracts = [span for span in collector.spans if span["name"] == "extract document"]
    assert len(extracts) == 2
    for span in extracts:
        parent = by_id[span["parent"]]
        assert (parent["name"], parent["service"], span["service"]) == (
            "submit document",
            "pipeline-submit",
            "pipeline-worker",
        )


def _whole_traces(collector: Collector) -> list[set[tuple[str, str]]]:
    traces: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for span in collector.spans:
        traces[span["trace"]].add((span["service"], span["name"]))
    return [
        names
        for names in traces.values()
        if {("pipeline-submit", "submit document"), ("pipeline-worker", "store extraction")} <= names
        and ("pipeline-worker", "llm.call") in names
    ]
