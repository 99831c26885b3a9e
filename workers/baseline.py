"""Bare Celery chords: the floors the benchmark's overhead regime (R3) compares to.

Same broker, serializer and delivery settings as the pipeline's app, nothing else.

- `python -m workers.baseline N` sends a chord of N no-ops (Celery alone);
- `python -m workers.baseline N --calls` sends a chord of N tasks that each make a document's
  two LLM calls and nothing else: one extraction request of a 20 KB chunk with the filing
  schema, one compression request, through the `openai` SDK to `PIPELINE_LLM_BASE_URL` (the
  same simulator as the pipeline's run, its answers cached). No pipeline task can be faster
  than this one and make those calls.

Each prints its wall time as JSON; the workers are `python -m celery -A workers.baseline
worker -Q baseline`.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from typing import Any

from celery import Celery, chord

from workers.app import create_app

app: Celery = create_app()
app.conf.update(task_default_queue="baseline", task_routes={}, include=[])
app.conf.broker_url = app.conf.result_backend = os.environ.get("PIPELINE_REDIS_URL", app.conf.broker_url)

CHUNK_CHARS = 20_000
"""About R3's filings: one chunk each."""
FILING_TEXT = ("Revenue grew in the fiscal year. Competition is a risk factor. " * 400)[:CHUNK_CHARS]
_local = threading.local()


@app.task(name="baseline.noop")
def noop(i: int) -> int:
    return i


@app.task(name="baseline.two_calls")
def two_calls(i: int) -> int:
    client = _client()
    client.chat.completions.with_raw_response.create(
        model="sim-1",
        messages=[
            {"role": "system", "content": "Extract the filing's facts as JSON."},
            {"role": "user", "content": f"<filing>\n{FILING_TEXT}\n</filing>"},
        ],
        response_format={"type": "json_schema", "json_schema": {"name": "filing", "schema": _schema()}},
        max_tokens=1500,
    ).parse()
    client.chat.completions.with_raw_response.create(
        model="sim-1",
        messages=[{"role": "user", "content": f"Summarize for the question: {FILING_TEXT[:2_000]}"}],
        max_tokens=300,
    ).parse()
    return i


def _client() -> Any:
    """One SDK client per worker thread, as the pipeline's pool gives each call a connection."""
    if not hasattr(_local, "client"):
        import openai

        base_url = os.environ["PIPELINE_LLM_BASE_URL"]
        _local.client = openai.OpenAI(base_url=base_url, api_key="sim", max_retries=0)
    return _local.client


@functools.cache
def _schema() -> dict[str, Any]:
    from pipeline.extraction.schemas import FilingExtraction

    return FilingExtraction.model_json_schema()


@app.task(name="baseline.done")
def done(results: list[int]) -> int:
    return len(results)


def main(n: int, calls: bool) -> None:
    task = two_calls if calls else noop
    started = time.monotonic()
    result = chord(task.si(i) for i in range(n))(done.s())
    count = result.get(timeout=3600)
    print(json.dumps({"tasks": count, "wall_s": time.monotonic() - started}))


if __name__ == "__main__":
    main(int(sys.argv[1]), "--calls" in sys.argv[2:])
