"""Operating a deployment: `pipeline db upgrade`, `worker`, `beat`, `watchdog`, `flower`, `doctor`."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.cli.base import (
    announce,
    broker_settings,
    console,
    deployment_settings,
    fail,
    main,
    open_engine,
)
from pipeline.core.settings import Settings, get_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="The Alembic revision to upgrade to.")
def db_upgrade(revision: str) -> None:
    """Apply pending migrations."""
    from pipeline.storage.db import upgrade

    url = get_settings().resolved_database_url
    upgrade(url, revision)
    click.echo(f"database at revision {revision}")


@main.command()
@click.option("--concurrency", "-c", type=int, help="Threads (default PIPELINE_WORKER_CONCURRENCY).")
@click.option(
    "--queues",
    "-Q",
    default="extract,report",
    show_default=True,
    help="Queues to consume, comma-separated: extract (documents' chunks), report (finalize, "
    "synthesis, batch polls, the watchdog, the nightly submit). Every queue needs a worker.",
)
@click.option(
    "--pool",
    type=click.Choice(["threads", "prefork", "solo"]),
    default="threads",
    show_default=True,
    help="threads: --concurrency threads in one process (the calls wait on I/O); prefork: "
    "child processes, one task each; solo: one task at a time, in the main process.",
)
@click.option("--name", "-n", default=None, help="Worker node name (default pipeline-PID@host).")
@click.option(
    "--loglevel", "-l", default="INFO", show_default=True, help="DEBUG, INFO, WARNING, ERROR or CRITICAL."
)
@click.option(
    "--task-events",
    "-E",
    is_flag=True,
    help="Send Celery task events from the start (default PIPELINE_TASK_EVENTS, off: "
    "`pipeline flower` turns them on when it starts).",
)
def worker(
    concurrency: int | None, queues: str, pool: str, name: str | None, loglevel: str, task_events: bool
) -> None:
    """Start a Celery worker (a thread pool by default).

    The work is I/O-bound (LLM calls), so threads carry it; prefork isolates each task in a
    child process."""
    if task_events:
        os.environ["PIPELINE_TASK_EVENTS"] = "true"
        get_settings.cache_clear()
    settings = deployment_settings("worker")
    if not settings.llm_base_url:
        fail("PIPELINE_LLM_BASE_URL (or OPENAI_BASE_URL) is not set: point it at the LLM endpoint")
    n = concurrency or settings.worker_concurrency
    # One INFO line per HTTP request drowns the task log; failures are logged by the tasks.
    for noisy in ("httpx", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ["PIPELINE_WORKER_CONCURRENCY"] = str(n)  # sizes the per-process pools
    os.environ["PIPELINE_WORKER_POOL"] = pool  # (a prefork child runs one task at a time)
    get_settings.cache_clear()
    from pipeline.storage.db import ping_before_checkout

    # No round trip before each transaction: the tasks retry a dropped connection's error.
    ping_before_checkout(False)
    # Threads per process and processes: a prefork worker's children (and the parent) each hold a pool.
    threads, processes = (n, 1) if pool == "threads" else (1, 1 + (n if pool == "prefork" else 0))
    _say_connection_budget(open_engine(get_settings()), get_settings(), threads, processes)
    from pipeline.cli import celery_app

    celery_app.worker_main(
        [
            "worker",
            f"--pool={pool}",
            f"--concurrency={n}",
            f"--queues={queues}",
            f"--hostname={name or f'pipeline-{os.getpid()}@%h'}",
            f"--loglevel={loglevel}",
            "--without-gossip",
            "--without-mingle",
        ]
    )


@main.command()
@click.option(
    "--loglevel", "-l", default="INFO", show_default=True, help="DEBUG, INFO, WARNING, ERROR or CRITICAL."
)
def beat(loglevel: str) -> None:
    """Start Celery beat, the deployment's clock.

    It sends the watchdog every PIPELINE_WATCHDOG_INTERVAL_S; with PIPELINE_INBOX set, the
    nightly submit of the inbox's new files on PIPELINE_INBOX_SCHEDULE (crontab, default
    "30 1 * * *": 01:30); with PIPELINE_RETENTION_DAYS set, the nightly prune of older runs.
    One beat per schedule (its inbox, or its broker without one) fires: a second waits as a
    standby, says so, and takes over within PIPELINE_LEASE_S of the first one stopping.
    Refuses to start (exit 2) when live workers publish their inbox and none of them reads
    this one."""
    settings = broker_settings()
    announce("beat", settings, broker_only=True)
    if settings.inbox:
        from pipeline.recovery.heartbeat import live_workers_at
        from pipeline.runs.inbox import check_inbox

        check = check_inbox(settings.inbox, live_workers_at(settings.redis_url or ""))
        if check.verdict == "refuse":
            fail(check.message)
        console.print(f"{'[yellow]warning:[/] ' if check.verdict == 'warn' else ''}{escape(check.message)}")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    from pipeline.cli import celery_app

    schedule = settings.data_dir / "celerybeat-schedule"
    # The scheduler fires only while it holds the schedule's lease (workers.beat).
    scheduler = "--scheduler=workers.beat:LeasedScheduler"
    celery_app.start(["beat", f"--schedule={schedule}", scheduler, f"--loglevel={loglevel}"])


@main.command()
def watchdog() -> None:
    """One watchdog pass: resume idle runs, mark stalled ones.

    What beat runs periodically: runs without activity for PIPELINE_WATCHDOG_IDLE_S are
    resumed, and marked stalled when resuming did not help."""
    from pipeline.cli.celery_app import resume_idle_runs

    settings = deployment_settings("watchdog")
    verdicts = resume_idle_runs(open_engine(settings), settings)
    for verdict in verdicts:
        console.print(f"run {verdict.run_id}: idle {verdict.idle_s:.0f} s, {verdict.action}")
    if not verdicts:
        console.print("no idle runs")


@main.command()
@click.option("--address", default=None, help="Interface to listen on (default PIPELINE_FLOWER_ADDRESS).")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="Port (default PIPELINE_FLOWER_PORT)."
)
@click.option(
    "--unauthenticated",
    is_flag=True,
    help="Start without basic auth: anyone who can reach the port sees every worker and task.",
)
def flower(address: str | None, port: int | None, unauthenticated: bool) -> None:
    """Start Flower, the web monitor of workers and tasks.

    With basic auth from PIPELINE_FLOWER_USER / PIPELINE_FLOWER_PASSWORD; Prometheus metrics
    at /metrics: Flower's of tasks and workers, and the LLM endpoints' circuit breakers."""
    from pipeline.core.errors import ConfigError
    from pipeline.runs.monitoring import BASIC_AUTH_ENV, METRICS_PATH, basic_auth, flower_argv

    settings = broker_settings()
    announce("flower", settings, broker_only=True)
    try:
        credentials = basic_auth(settings, unauthenticated=unauthenticated)
    except ConfigError as exc:
        fail(str(exc))
    address = address or settings.flower_address
    port = port or settings.flower_port
    if credentials is None:
        os.environ.pop(BASIC_AUTH_ENV, None)
        console.print(
            f"[bold red]WARNING: Flower starts WITHOUT authentication on {escape(address)}:{port}: "
            "anyone who can reach it sees every worker and task.[/] Set PIPELINE_FLOWER_USER and "
            "PIPELINE_FLOWER_PASSWORD to require a login."
        )
    else:
        # Flower reads it from its environment: not on a command line `ps` shows, nor in a log.
        os.environ[BASIC_AUTH_ENV] = credentials
    _enable_task_events()
    from pipeline.runs import metrics

    metrics.register(
        settings.limiter_redis_url or settings.redis_url or ""
    )  # the circuits' state, per scrape
    console.print(f"Flower on http://{escape(address)}:{port}/ (Prometheus metrics at {METRICS_PATH})")
    from pipeline.cli import celery_app

    sys.exit(celery_app.start(flower_argv(address, port)) or 0)


ENABLE_EVENTS_TIMEOUT_S = 1.0
"""How long `pipeline flower` collects the running workers' answers to `enable_events`."""


def _enable_task_events() -> None:
    """Turn task events on in the running workers (`celery control enable_events`), so that
    Flower lists their tasks from its start; workers send none otherwise (PIPELINE_TASK_EVENTS).
    Flower itself repeats the command every 5 s, which reaches the workers that start later."""
    from pipeline.cli import celery_app

    answers = io.StringIO()
    argv = ["control", "enable_events", "--timeout", str(ENABLE_EVENTS_TIMEOUT_S), "--json"]
    try:
        with contextlib.redirect_stdout(answers):
            celery_app.start(argv)
    except click.ClickException:  # no worker answered: none runs yet
        console.print("task events: no worker is running yet; Flower turns them on in those that start")
        return
    replies = json.loads(answers.getvalue() or "[]")
    console.print(f"task events: on in the {len(replies)} running worker(s)")


def _say_connection_budget(engine: Engine, settings: Settings, threads: int, processes: int) -> None:
    """The start line on database connections: what this deployment (the live worker processes
    and this worker's) needs against what the server allows; a warning when it will not fit."""
    from pipeline.recovery.heartbeat import live_workers_at
    from pipeline.storage.connections import budget_line, process_connections, server_room

    if engine.dialect.name != "postgresql":
        return
    try:
        room = server_room(engine)
    except Exception as exc:  # a server that hides pg_settings: say so, start anyway
        console.print(f"database connections: not counted ({escape(str(exc).splitlines()[0])})")
        return
    live = live_workers_at(settings.redis_url) if settings.redis_url else None
    workers = len(live or []) + processes  # this one's are not beating yet
    per_worker = process_connections(settings.db_pool_size, threads)
    line, fits = budget_line(workers, per_worker, room, pooler=settings.db_transaction_pooler)
    console.print(f"[yellow]warning:[/] {escape(line)}" if not fits else escape(line), highlight=False)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor(as_json: bool) -> None:
    """Check the configured LLM endpoint before a run.

    In order: reachable, API key accepted, models listed, a structured-output mode that works,
    rate-limit headers (a warning), Batch API; it stops at the first failure and says how to
    fix it.

    Exits 3 when the endpoint cannot be reached, 5 when it refuses the key or the model or no
    structured-output mode works."""
    from pipeline.llm.doctor import diagnose, host_of

    settings = get_settings()
    if not settings.llm_base_url:
        fail("PIPELINE_LLM_BASE_URL (or OPENAI_BASE_URL) is not set: point it at the LLM endpoint")
    found = diagnose(settings)
    if as_json:
        click.echo(json.dumps(found.as_dict(), indent=2))
        sys.exit(found.verdict.exit_code)
    out = Console(soft_wrap=True)  # the report is the output: stdout
    out.print(f"endpoint {escape(found.endpoint)}, model {escape(found.model)}")
    if "reachability" in found.passed:
        out.print(f"reachable: yes ({escape(host_of(found.endpoint))})")
    if "authentication" in found.passed:
        out.print("API key: accepted")
    if "models" in found.passed:
        if found.models:
            out.print(f"models listed: {escape(', '.join(found.models))} (this model listed: yes)")
        out.print(f"context window: {found.context_window or 'not stated'}")
    if found.modes:
        table = Table("structured output", "works", "latency s", "detail", title="one-line calls")
        for mode in found.modes:
            latency = f"{mode.latency_s:.2f}" if mode.latency_s is not None else ""
            table.add_row(mode.mode, "yes" if mode.works else "no", latency, escape(mode.detail))
        out.print(table)
    if "headers" in found.passed:
        if found.headers_sent and found.limits is not None:
            told = found.limits
            out.print(
                f"x-ratelimit headers: yes (requests {told.limit_requests}, remaining {told.remaining_requests}; "
                f"tokens {told.limit_tokens}, remaining {told.remaining_tokens})"
            )
        out.print(f"Batch API: {found.batch}")
    for warning in found.warnings:
        out.print(f"[yellow]warning:[/] {escape(warning)}")
    if not found.verdict.ok:
        fail(found.verdict.message, found.verdict.exit_code)
    out.print(escape(found.verdict.message))
