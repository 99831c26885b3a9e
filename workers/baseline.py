"""A bare Celery chord of no-op tasks: the floor the benchmark's overhead regime compares to.

Same broker, serializer and delivery settings as the pipeline's app, nothing else.
`python -m workers.baseline N` sends a chord of N no-ops and prints its wall time as JSON;
the workers are `python -m celery -A workers.baseline worker -Q baseline`.
"""

from __future__ import annotations

import json
import os
import sys
import time

from celery import Celery, chord

from workers.app import create_app

app: Celery = create_app()
app.conf.update(task_default_queue="baseline", task_routes={}, include=[])
app.conf.broker_url = app.conf.result_backend = os.environ.get("PIPELINE_REDIS_URL", app.conf.broker_url)


@app.task(name="baseline.noop")
def noop(i: int) -> int:
    return i


@app.task(name="baseline.done")
def done(results: list[int]) -> int:
    return len(results)


def main(n: int) -> None:
    started = time.monotonic()
    result = chord(noop.si(i) for i in range(n))(done.s())
    count = result.get(timeout=3600)
    print(json.dumps({"tasks": count, "wall_s": time.monotonic() - started}))


if __name__ == "__main__":
    main(int(sys.argv[1]))
