"""What a document costs the stack in Redis commands and Postgres round trips, on real workers
(tests/roundtrips.py counts them; `python -m tests.roundtrips` prints the figures), and what must
cost nothing: limiter scripts where no limit applies, task events where nobody watches."""

from __future__ import annotations

import json

from tests.roundtrips import measure


def test_with_no_limit_and_no_monitor_calls_run_no_limiter_script_and_tasks_send_no_events() -> None:
    measured = measure("plain", documents=4, idle_s=0.0)
    print(json.dumps(measured.summary(), indent=2))
    assert measured.calls >= 2 * measured.documents and sum(measured.tasks.values()) > measured.documents
    assert measured.scripts["acquire.lua"] == measured.scripts["release.lua"] == 0, measured.scripts
    assert not [k for k in measured.events if k.startswith("task.")], measured.events
    assert measured.events["worker.heartbeat"] > 0, "the tap hears the workers' events"
    # Every transaction ends, and none begins without a statement: no ping, no empty ones.
    pg = measured.workers_pg
    assert pg["transactions"] > 0 and pg["statements"] >= pg["transactions"]
