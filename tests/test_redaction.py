"""No secret leaves the pipeline (issue 30, finding 1).

A night of three runs goes through real workers, a real Flower, a private Redis with a password,
the session's Postgres and a simulator that quotes the API key, whole, in every error it returns
(`pipeline sim --echo-key`): the synchronous path meets each of OpenAI's documented errors
(`[[sim:fail-NNN]]`: 400, 401, 403, 404, 429, 500, 503); a batch run's lines meet them in its
error file; another batch run meets them from the Files and Batches API itself (429, 500, 503,
403, 401 in turn, `POST /sim/batch-api-errors`) and then a batch failed on the enqueued-token
limit. The canaries (the API key, the Redis password, the database password, Flower's password,
each unique to this module) are then looked for everywhere the pipeline writes: the workers',
Flower's and every command's output, every column of every table, every key and value of the
Redis (queues, results, the limiter's and circuit's keys), `pipeline status --json`, the report in
Markdown and HTML, and Flower's API. The redaction must have worked, not been skipped: the error
columns hold "[redacted]" where the key was.

The API key has no provider's shape (no `sk-`): only the configured secret's own match masks it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest
import redis
from pydantic import ValidationError
from sqlalchemy import Engine, func, select, text
from sqlalchemy.engine import make_url

from pipeline.core.redaction import MASK, redact
from pipeline.core.settings import Settings
from pipeline.runtime import embedded
from pipeline.storage.db import get_engine, session_scope, upgrade
from pipeline.storage.models import Document, LLMBatch, LLMCall, Report, Run, RunStatus
from pipeline_dev.sim.request import FAILING_STATUSES
from pipeline_dev.synth_filings import generate_filing
from tests.commands import outputs_of
from tests.conftest import eventually, new_database, pipeline_child, running_simulator, running_workers
from tests.test_flower import Flower, node_name
from tests.test_security import _message_bodies, _redis_texts

FLOWER_USER = "ops"
BATCH_API_STATUSES = [429, 500, 503, 403, 401]
"""What the Files and Batches API answers the batch run's first requests with, in this order."""
FINAL = (RunStatus.COMPLETED, RunStatus.FAILED)
RUN_WAIT_S = 150.0
"""How long a run may take to end: about 10 s alone, and a CI run under the whole suite's load took
over 45 s (a bound on a failure, not a measure)."""


@dataclass
class Night:
    env: dict[str, str]
    canaries: dict[str, str]
    """What each secret is: api key, database, redis and flower passwords."""
    runs: dict[str, str]
    """sync, lines (batch: its lines fail), api (batch: the API fails): run ids."""
    engine: Engine
    redis_url: str
    sim_url: str
    flower: Flower
    logs: list[Path]
    outputs: list[str] = field(default_factory=list)
    """What every command printed (stdout and stderr)."""

    def found_in(self, text: str) -> list[str]:
        return [name for name, secret in self.canaries.items() if secret in text]


def _filings(folder: Path, hooks: list[str], seed: int) -> Path:
    folder.mkdir(parents=True)
    for index, hook in enumerate(hooks):
        body, truth = generate_filing(index, seed=seed, target_bytes=5_000)
        (folder / truth.filename).write_text(f"{body}\n{hook}\n", encoding="utf-8")
    return folder


def _sim(sim_url: str, path: str, body: dict[str, object]) -> None:
    httpx.post(sim_url.removesuffix("/v1") + path, json=body, timeout=10).raise_for_status()


def _handed_over(engine: Engine, run_id: str) -> bool:
    """The batch run left the batch path (what it has not answered goes synchronously)."""
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        return run is not None and run.dispatched_at is not None


def _reported(engine: Engine, run_id: str) -> bool:
    with session_scope(engine) as session:
        run = session.get(Run, run_id)
        report = session.scalar(select(Report.id).where(Report.run_id == run_id))
        return run is not None and run.status in FINAL and report is not None


@pytest.fixture(scope="module")
def night(
    postgres_url: str | None, pipeline_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Night]:
    if postgres_url is None:
        pytest.skip("the scan of every column reads Postgres's information_schema")
    tag = uuid.uuid4().hex
    canaries = {
        "api key": f"canary{tag[:16]}key",
        "database password": f"canary{tag[16:]}db",
        "redis password": f"canary{uuid.uuid4().hex}redis",
        "flower password": f"canary{uuid.uuid4().hex}flower",
    }
    root = tmp_path_factory.mktemp("redaction")
    with ExitStack() as stack:
        server, plain_url = embedded.start_redis(root / "redis")
        stack.enter_context(server)
        admin = redis.Redis.from_url(plain_url)
        admin.config_set("requirepass", canaries["redis password"])
        admin.close()
        base = plain_url.replace("redis://", f"redis://:{canaries['redis password']}@").rsplit("/", 1)[0]
        sim_url = stack.enter_context(
            running_simulator(
                root, "--echo-key", "--p50", "0.005", "--p95", "0.01", "--batch-duration", "0.3",
                "--batch-validate-s", "0.1",
            )
        )  # fmt: skip
        # A database of its own: any worker's heartbeat restarts the batch polls of every run in
        # its database, and the session's workers, on another simulator, polled this night's
        # batches there (a 404 stored as a batch's error).
        own_database = stack.enter_context(new_database(postgres_url, "pipeline_redaction"))
        upgrade(own_database)
        database = make_url(own_database).set(password=canaries["database password"])  # trust: not checked
        env = {
            **pipeline_env,
            "PIPELINE_DATABASE_URL": database.render_as_string(hide_password=False),
            "PIPELINE_REDIS_URL": f"{base}/0",
            "PIPELINE_LIMITER_REDIS_URL": f"{base}/1",
            "PIPELINE_LLM_BASE_URL": sim_url,
            "PIPELINE_LLM_API_KEY": canaries["api key"],
            "PIPELINE_FLOWER_USER": FLOWER_USER,
            "PIPELINE_FLOWER_PASSWORD": canaries["flower password"],
            "PIPELINE_DATA_DIR": str(root / "data"),
            "PIPELINE_LOG_FORMAT": "json",
            "PIPELINE_TASK_EVENTS": "true",
            # Every failure is recorded at once: no task retries, no circuit opened by the 5xx.
            "PIPELINE_TASK_MAX_RETRIES": "0",
            "PIPELINE_CIRCUIT_FAILURES": "1000",
            "PIPELINE_BATCH_POLL_S": "0.3",
            "PIPELINE_BATCH_DEADLINE_MARGIN_S": "1",
            "PIPELINE_BATCH_MAX_REQUESTS": "1",  # a batch per chunk: more batches, more errors
        }
        # Flower starts while the workers do; it is listening once they are ready.
        port = embedded.free_port()
        flower_log = root / "flower.log"
        flower_child = stack.enter_context(
            pipeline_child("flower", ["flower", "--port", str(port)], embedded.child_env(env), flower_log)
        )
        workers = stack.enter_context(running_workers(env, root, count=1, concurrency=12))
        embedded.wait_for_port(port, child=flower_child)
        flower = Flower(flower_child, f"http://127.0.0.1:{port}")
        auth = (FLOWER_USER, canaries["flower password"])
        eventually(
            "the worker's heartbeats in Flower",
            lambda: all(
                f'flower_worker_online{{worker="{node_name(w)}"}} 1.0' in flower.get("/metrics", auth).text
                for w in workers
            ),
        )
        engine = get_engine(env["PIPELINE_DATABASE_URL"])
        failing = [f"[[sim:fail-{status}]]" for status in FAILING_STATUSES]
        night = Night(
            env,
            canaries,
            {},
            engine,
            f"{base}/0",
            sim_url,
            flower,
            [w.log_path for w in workers if w.log_path] + [flower_log],
        )

        def submit(runs: dict[str, tuple[Path, str]]) -> None:
            """Submit each folder in its mode, the submits side by side."""
            commands = [["submit", str(folder), "--fresh", "--mode", mode] for folder, mode in runs.values()]
            for name, (out, err) in zip(runs, outputs_of(env, commands, root), strict=True):
                night.outputs.append(out + err)
                night.runs[name] = out.strip().splitlines()[-1]

        # First the Files and Batches API refuses, then a batch fails on the enqueued-token limit.
        _sim(sim_url, "/sim/config", {"batch_enqueued_tokens": 1})
        _sim(sim_url, "/sim/batch-api-errors", {"statuses": BATCH_API_STATUSES})
        submit({"api": (_filings(root / "api", ["", ""], seed=33), "batch")})
        eventually("the api run's batches", lambda: _handed_over(engine, night.runs["api"]), RUN_WAIT_S)
        # Then, with the Batch API answering as usual, the synchronous path and a batch's lines.
        _sim(sim_url, "/sim/config", {"batch_enqueued_tokens": 0})
        lines = _filings(root / "lines", ["", *failing], seed=32)
        submit(
            {
                "lines": (lines, "batch"),
                "sync": (_filings(root / "sync", ["", "[[sim:badkey]]", *failing], seed=31), "sync"),
            }
        )
        for name in night.runs:
            eventually(
                f"the {name} run's report", lambda n=name: _reported(engine, night.runs[n]), RUN_WAIT_S
            )
        # Each run's status (it reads the circuit's last error in Redis too), a report in Markdown
        # and one as the HTML page (the run's failures, its calls), the commands side by side.
        reads = [["status", run_id, "--json"] for run_id in night.runs.values()]
        reads += [["report", night.runs["api"]], ["report", night.runs["sync"], "--format", "html"]]
        night.outputs.extend(out + err for out, err in outputs_of(env, reads, root))
        yield night


@pytest.mark.slow
def test_the_simulator_quotes_the_key_in_each_documented_error_the_sdk_knows(night: Night) -> None:
    """As the openai SDK reads them: each status is its exception class, and its words hold the
    key whole, on the chat endpoint and from the Files and Batches API."""
    key = night.canaries["api key"]
    client = openai.OpenAI(base_url=night.sim_url, api_key=key, max_retries=0)
    expected: dict[int, type[openai.APIStatusError]] = {
        400: openai.BadRequestError,
        401: openai.AuthenticationError,
        403: openai.PermissionDeniedError,
        404: openai.NotFoundError,
        429: openai.RateLimitError,
        500: openai.InternalServerError,
        503: openai.InternalServerError,
    }
    assert set(expected) == set(FAILING_STATUSES)
    for status, kind in expected.items():
        with pytest.raises(kind) as refused:
            client.chat.completions.create(
                model="sim-1", messages=[{"role": "user", "content": f"[[sim:fail-{status}]]"}], max_tokens=20
            )
        assert refused.value.status_code == status and key in str(refused.value), refused.value
    _sim(night.sim_url, "/sim/batch-api-errors", {"statuses": BATCH_API_STATUSES})
    for status in BATCH_API_STATUSES:
        with pytest.raises(expected[status]) as refused:
            client.files.list()
        assert refused.value.status_code == status and key in str(refused.value), refused.value
    assert client.files.list() is not None  # the queue is spent: answered as usual
    client.close()


@pytest.mark.slow
def test_the_errors_carried_the_key_and_were_redacted_where_stored(night: Night) -> None:
    """Each documented error reached the pipeline (a failed document per status, a batch row per
    refusal of the API) and its stored words hold the mask where the provider quoted the key."""
    with session_scope(night.engine) as session:
        failed = session.scalars(
            select(Document.error).where(Document.run_id == night.runs["sync"], Document.status == "failed")
        ).all()
        refusals = session.scalars(
            select(LLMBatch.error).where(LLMBatch.run_id == night.runs["api"], LLMBatch.error.is_not(None))
        ).all()
        masked_calls = session.scalar(
            select(func.count()).where(LLMCall.run_id == night.runs["lines"], LLMCall.error.contains(MASK))
        )
    assert len(failed) == len(FAILING_STATUSES) + 1, failed  # every hook, and the badkey one
    assert all(MASK in error for error in failed), failed
    assert any("HTTP 401" in error and MASK in error for error in refusals), refusals
    assert any("token_limit_exceeded" in error and MASK in error for error in refusals), refusals
    assert masked_calls, "the batch run's failed lines went synchronously, and failed there too"


@pytest.mark.slow
def test_no_log_or_command_output_holds_a_secret(night: Night) -> None:
    for log in night.logs:
        assert not night.found_in(log.read_text(errors="replace")), log
    for output in night.outputs:
        assert not night.found_in(output), output[:2000]
    status_and_reports = "\n".join(night.outputs)
    assert '"run_id"' in status_and_reports and "<html" in status_and_reports, "status --json, report html"


@pytest.mark.slow
def test_no_column_of_any_table_holds_a_secret(night: Night) -> None:
    with night.engine.connect() as conn:
        columns = conn.execute(
            text(
                "select table_name, column_name, data_type from information_schema.columns "
                "where table_schema = 'public'"
            )
        ).all()
        assert {"documents", "llm_calls", "llm_batches", "runs", "dead_letters"} <= {t for t, _, _ in columns}
        for table, column, kind in columns:
            value = f"encode(\"{column}\", 'escape')" if kind == "bytea" else f'"{column}"::text'
            for name, secret in night.canaries.items():
                hits = conn.execute(
                    text(f'select count(*) from "{table}" where position(:secret in {value}) > 0'),
                    {"secret": secret},
                ).scalar_one()
                assert not hits, f"the {name} is in {table}.{column}"


@pytest.mark.slow
def test_no_key_or_value_in_redis_holds_a_secret(night: Night) -> None:
    """Queues (message bodies decoded), results, the limiter's and the circuit's keys."""
    seen: list[str] = []
    for index in (0, 1):
        client = redis.Redis.from_url(night.redis_url.rsplit("/", 1)[0] + f"/{index}")
        seen.extend(_redis_texts(client))
        client.close()
    assert any(key.startswith("celery-task-meta-") for key in seen), "task results were stored"
    bodies = [body for value in seen for body in _message_bodies(value)]
    leaked = [value for value in [*seen, *bodies] if night.found_in(value)]
    assert not leaked, leaked[:1]


@pytest.mark.slow
def test_flower_shows_no_secret(night: Night) -> None:
    auth = (FLOWER_USER, night.canaries["flower password"])
    tasks = night.flower.get("/api/tasks", auth)
    assert tasks.status_code == 200 and "pipeline.extract" in tasks.text, tasks.text[:500]
    for path in ("/api/tasks", "/api/workers", "/metrics"):
        assert not night.found_in(night.flower.get(path, auth).text), path


def test_redact_masks_configured_secrets_urls_and_key_shapes() -> None:
    settings = Settings(
        llm_api_keys="first-key-1234,second-key-5678",
        database_url="postgresql://app:p%40ss%2Fword@db:5432/pipeline",
        flower_password="flower-secret",
    )
    said = (
        "Incorrect API key provided: sk-abc***wxyz. first-key-1234 second-key-5678 p@ss/word p%40ss%2Fword "
        "flower-secret redis://:other@cache:6379/0 Authorization: Bearer tok.en api_key=hunter22 gw-live-7f3a99"
    )
    cleaned = redact(said, settings)
    for secret in ("sk-abc", "first-key", "second-key", "p@ss", "p%40ss", "flower-secret", "other", "tok.en"):
        assert secret not in cleaned, (secret, cleaned)
    assert "hunter22" not in cleaned and "gw-live" not in cleaned, cleaned
    assert "Incorrect API key provided: [redacted]. " in cleaned  # the sentence stays readable
    assert redact(cleaned, settings) == cleaned
    assert redact("task-abc disk-full the API key (PIPELINE_LLM_API_KEY)", settings) == (
        "task-abc disk-full the API key (PIPELINE_LLM_API_KEY)"
    )


def test_a_refused_setting_does_not_quote_the_url_it_refused() -> None:
    """Pydantic quotes a refused value in its message (and the traceback `--debug` shows): a
    URL's password with it, before any setting could tell redaction what to mask."""
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None, redis_url="http://:canary-pw-5e1f@cache:6379/0")
    assert "canary-pw-5e1f" not in str(refused.value), str(refused.value)
    assert "redis_url" in str(refused.value)
