"""The `pipeline` command line."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline import __version__
from pipeline.core.settings import Settings, get_settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.runs.status import RunStatusView

console = Console(stderr=True, soft_wrap=True)
STATUS_GROUNDING_ROWS = 20


def _engine(settings: Settings) -> Engine:
    from pipeline.storage.db import ensure_schema

    return ensure_schema(settings.resolved_database_url)


def _broker_settings(hint: str = "") -> Settings:
    """The settings, for a command that needs the broker: exits 2 when none is configured."""
    settings = get_settings()
    if not settings.redis_url:
        _fail(f"PIPELINE_REDIS_URL is not set: point it at the broker{hint}")
    return settings


def _fail(message: str, code: int = 2) -> NoReturn:
    console.print(f"[bold red]error:[/] {escape(message)}")
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__)
def main() -> None:
    """Batch LLM extraction over filings: submit, work, report."""


# -- database ----------------------------------------------------------------------------


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Apply pending migrations."""
    from pipeline.storage.db import upgrade

    url = get_settings().resolved_database_url
    upgrade(url, revision)
    click.echo(f"database at revision {revision}")


# -- producer and workers ----------------------------------------------------------------


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--query", help="The question the run's report answers.")
@click.option("--name", help="A name for the run.")
@click.option("--wait", is_flag=True, help="Show progress until the run ends.")
@click.option("--fresh", is_flag=True, help="Ask the LLM again for filings answered by earlier runs.")
@click.option(
    "--schema",
    "schema",
    metavar="MODULE:MODEL",
    help="Extract with this pydantic model instead of the 10-K schema.",
)
@click.option("--new-only", is_flag=True, help="Leave out files whose content an earlier run extracted.")
def submit(
    paths: tuple[str, ...],
    query: str | None,
    name: str | None,
    wait: bool,
    fresh: bool,
    schema: str | None,
    new_only: bool,
) -> None:
    """Submit files (paths, globs, directories) as one run; prints the run id."""
    settings = _broker_settings(", or use `pipeline run` for the embedded all-in-one")
    code, _ = _submit_and_wait(
        settings,
        list(paths),
        query=query,
        name=name,
        wait=wait,
        fresh=fresh,
        new_only=new_only,
        schema=schema,
    )
    sys.exit(code)


def _submit_and_wait(
    settings: Settings,
    paths: list[str],
    *,
    query: str | None,
    name: str | None,
    wait: bool,
    fresh: bool = False,
    new_only: bool = False,
    schema: str | None = None,
    simulated: bool = False,
    check: Callable[[], str | None] | None = None,
) -> tuple[int, str]:
    """Store and enqueue the run; with `wait`, follow it. Returns the exit code and run id."""
    from pipeline.ingest.producer import prepare_run
    from pipeline.runs.progress import WaitAborted, wait_for_run
    from workers.canvas import enqueue_run

    if schema:
        from pipeline.extraction.custom import load_schema

        try:
            load_schema(schema)
        except ValueError as exc:
            _fail(str(exc))
    engine = _engine(settings)
    plan = prepare_run(
        engine,
        settings,
        paths,
        query=query,
        name=name,
        simulated=simulated,
        reuse_answers=not fresh,
        only_new=new_only,
        schema=schema,
    )
    if plan.already_processed:
        console.print(f"{len(plan.already_processed)} files left out: an earlier run extracted them")
    if not plan.created:
        console.print("nothing new to submit")
        return 0, ""
    for path, reason in plan.rejected:
        console.print(f"[yellow]skipped[/] {escape(path)}: {escape(reason)}")
    if not plan.document_ids:
        console.print(f"[bold red]error:[/] no usable document in {escape(' '.join(paths))}")
        click.echo(plan.run_id)
        return 1, plan.run_id
    enqueue_run(plan.run_id, plan.document_ids)
    console.print(f"submitted {len(plan.document_ids)} documents")
    click.echo(plan.run_id)
    if not wait:
        return 0, plan.run_id
    try:
        view = wait_for_run(engine, plan.run_id, console, check=check)
    except WaitAborted as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}")
        return 1, plan.run_id
    except KeyboardInterrupt:
        console.print(f"stopped waiting; the run goes on: pipeline status {plan.run_id}")
        return 130, plan.run_id
    return _outcome(view), plan.run_id


@main.command()
@click.argument("run")
@click.option(
    "--stale-after-s",
    default=600.0,
    show_default=True,
    help="Re-enqueue running documents without progress for this long.",
)
@click.option("--wait", is_flag=True, help="Show progress until the run ends.")
def resume(run: str, stale_after_s: float, wait: bool) -> None:
    """Finish an interrupted run: enqueue its unfinished documents again, then finalize."""
    from pipeline.runs.progress import WaitAborted, wait_for_run
    from pipeline.runs.resume import plan_resume
    from pipeline.runs.status import UnknownRun, resolve_run_id
    from workers.canvas import enqueue_resume

    settings = _broker_settings()
    engine = _engine(settings)
    try:
        run_id = resolve_run_id(engine, run)
    except UnknownRun as exc:
        _fail(str(exc))
    plan = plan_resume(engine, run_id, stale_after_s)
    if plan.has_report:
        console.print(f"run {run_id} has its report: nothing to resume")
        sys.exit(0)
    enqueue_resume(plan)
    console.print(
        f"resumed {run_id}: {len(plan.document_ids)} documents enqueued again"
        + (f", {plan.left_running} still running elsewhere" if plan.left_running else "")
    )
    if not wait:
        sys.exit(0)
    try:
        view = wait_for_run(engine, run_id, console)
    except WaitAborted as exc:
        _fail(str(exc), 1)
    sys.exit(_outcome(view))


@main.command()
@click.option("--concurrency", "-c", type=int, help="Threads (default PIPELINE_WORKER_CONCURRENCY).")
@click.option("--queues", "-Q", default="extract,report", show_default=True)
@click.option("--pool", default="threads", show_default=True, help="threads, prefork or solo")
@click.option("--name", "-n", default=None, help="Worker node name (default pipeline-PID@host).")
@click.option("--loglevel", "-l", default="INFO", show_default=True)
def worker(concurrency: int | None, queues: str, pool: str, name: str | None, loglevel: str) -> None:
    """Start a Celery worker (I/O-bound: a thread pool by default)."""
    settings = _broker_settings()
    if not settings.llm_base_url:
        _fail("PIPELINE_LLM_BASE_URL (or OPENAI_BASE_URL) is not set: point it at the LLM endpoint")
    n = concurrency or settings.worker_concurrency
    # One INFO line per HTTP request drowns the task log; failures are logged by the tasks.
    for noisy in ("httpx", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ["PIPELINE_WORKER_CONCURRENCY"] = str(n)  # sizes the per-process pools
    get_settings.cache_clear()
    _engine(get_settings())
    from workers.app import app

    app.worker_main(
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
@click.option("--loglevel", "-l", default="INFO", show_default=True)
def beat(loglevel: str) -> None:
    """Start Celery beat: the periodic watchdog (run exactly one beat per deployment)."""
    settings = _broker_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    from workers.app import app

    schedule = settings.data_dir / "celerybeat-schedule"
    app.start(["beat", f"--schedule={schedule}", f"--loglevel={loglevel}"])


@main.command()
def watchdog() -> None:
    """One watchdog pass (what beat runs periodically): resume runs without activity for
    PIPELINE_WATCHDOG_IDLE_S, mark stalled those that resuming did not help."""
    from workers.canvas import resume_idle_runs

    settings = _broker_settings()
    verdicts = resume_idle_runs(_engine(settings), settings)
    for verdict in verdicts:
        console.print(f"run {verdict.run_id}: idle {verdict.idle_s:.0f} s, {verdict.action}")
    if not verdicts:
        console.print("no idle runs")


# -- reading results ---------------------------------------------------------------------


def _outcome(view: RunStatusView) -> int:
    """Print how a followed run ended; its exit code: 0 only for a completed run with its report."""
    _print_status(view)
    if view.error:
        console.print(f"[bold red]run failed:[/] {escape(view.error)}")
    return 0 if view.has_report and view.status == "completed" else 1


def _print_status(view: RunStatusView) -> None:
    docs = ", ".join(f"{n} {s}" for s, n in sorted(view.documents.items())) or "no documents"
    console.print(
        f"run {view.run_id} [bold]{view.status}[/]{' (simulated)' if view.simulated else ''}: {docs}; "
        f"{view.llm_calls} LLM calls, {view.prompt_tokens + view.completion_tokens:,} tokens, "
        f"{_cost_text(view)}, {view.elapsed_s:.1f} s"
    )


def _cost_text(view: RunStatusView) -> str:
    cost = "cost unknown" if view.cost_usd is None else f"${view.cost_usd:,.4f}"
    if view.cost_usd is not None and view.unpriced_calls:
        cost += f" (+{view.unpriced_calls} calls without a price)"
    if view.budget_usd is not None:
        cost += f" of a ${view.budget_usd:,.2f} budget"
    return cost


@main.command()
@click.argument("run", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def status(run: str | None, as_json: bool) -> None:
    """Documents by status, tokens and elapsed time of RUN (default: the newest), and the
    global limiter's state."""
    from dataclasses import asdict

    from pipeline.runs.status import UnknownRun, document_grounding, limiter_views, resolve_run_id, run_status

    settings = get_settings()
    engine = _engine(settings)
    try:
        view = run_status(engine, resolve_run_id(engine, run))
    except UnknownRun as exc:
        _fail(str(exc))
    limiter = limiter_views(settings)
    grounding = document_grounding(engine, view.run_id)
    if as_json:
        documents = [asdict(d) for d in grounding]
        click.echo(json.dumps({**view.as_dict(), "grounding": documents, "limiter": limiter}, indent=2))
        return
    out = Console()
    table = Table(title=f"run {view.run_id}", show_header=False)
    for key, value in view.as_dict().items():
        if key in ("cost_usd", "unpriced_calls", "budget_usd"):
            continue
        table.add_row(key, json.dumps(value) if isinstance(value, dict) else str(value))
    table.add_row("cost", _cost_text(view))
    out.print(table)
    if grounding:
        shown = grounding[:STATUS_GROUNDING_ROWS]
        title = f"quotes found in the filing, per document (lowest {len(shown)} of {len(grounding)})"
        rows = Table("quotes", "found", "rate", "revenue quote", "injection", title=title)
        rows.add_column("document", overflow="fold")
        for d in shown:
            revenue = {True: "found", False: "NOT FOUND", None: ""}[d.revenue_grounded]
            share = "" if d.grounding_rate is None else f"{d.grounding_rate:.0%}"
            rows.add_row(
                str(d.quotes_total),
                str(d.quotes_grounded),
                share,
                revenue,
                "FLAGGED" if d.injection_flag else "",
                escape(d.path),
            )
        out.print(rows)
    if limiter:
        columns = [
            "model",
            "key_slot",
            "rpm",
            "effective_rpm",
            "tpm",
            "effective_tpm",
            "requests_in_window",
            "tokens_in_window",
            "inflight",
            "paused_for_s",
        ]
        limits = Table(*columns, title=f"global limiter (window {settings.rate_limit_window_s:g} s)")
        for scope in limiter:
            limits.add_row(*(str(scope[c]) for c in columns))
        out.print(limits)


@main.command()
@click.option("--limit", default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def runs(limit: int, as_json: bool) -> None:
    """The newest runs."""
    from pipeline.runs.status import list_runs

    views = list_runs(_engine(get_settings()), limit)
    if as_json:
        click.echo(json.dumps([v.as_dict() for v in views], indent=2))
        return
    table = Table("name", "status", "documents", "created", "elapsed s")
    table.add_column("run", no_wrap=True)
    for view in views:
        docs = ", ".join(f"{n} {s}" for s, n in sorted(view.documents.items()))
        table.add_row(
            view.name or "", view.status, docs, view.created_at, f"{view.elapsed_s:.1f}", view.run_id
        )
    Console(width=200).print(table)


@main.command()
@click.argument("run", required=False)
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path))
def report(run: str | None, fmt: str, output: Path | None) -> None:
    """Print or write the report of RUN (default: the newest)."""
    from sqlalchemy import select

    from pipeline.runs.status import UnknownRun, resolve_run_id
    from pipeline.storage.db import session_scope
    from pipeline.storage.models import Report

    engine = _engine(get_settings())
    try:
        run_id = resolve_run_id(engine, run)
    except UnknownRun as exc:
        _fail(str(exc))
    with session_scope(engine) as session:
        row = session.scalar(select(Report).where(Report.run_id == run_id))
        if row is None:
            _fail(f"run {run_id} has no report yet (see `pipeline status {run_id}`)")
        text = row.markdown if fmt == "md" else json.dumps(row.json, indent=2)
    if output:
        output.write_text(text, encoding="utf-8")
        console.print(f"wrote {output}")
    else:
        click.echo(text)


@main.command("eval")
@click.argument("run")
@click.option(
    "--truth",
    "truth_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Truth file in the format of examples/truth.json.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.option("--revenue-tolerance", default=0.01, show_default=True, help="Relative tolerance of revenue.")
@click.option(
    "--title-threshold",
    default=0.85,
    show_default=True,
    help="difflib ratio at which two risk-factor titles match (after normalising).",
)
@click.option("--grounded-only", is_flag=True, help="Count only facts whose quote was found in the filing.")
def eval_(
    run: str,
    truth_path: Path,
    as_json: bool,
    revenue_tolerance: float,
    title_threshold: float,
    grounded_only: bool,
) -> None:
    """Score RUN's extractions against a truth file, per filing (matched by file name) and overall."""
    from pipeline.reporting.evaluate import evaluate, load_run, load_truth
    from pipeline.runs.status import UnknownRun, resolve_run_id

    engine = _engine(get_settings())
    try:
        run_id = resolve_run_id(engine, run)
    except UnknownRun as exc:
        _fail(str(exc))
    try:
        truths = load_truth(truth_path)
    except (ValueError, KeyError, TypeError) as exc:
        _fail(f"cannot read the truth file {truth_path}: {exc!r}")
    result = evaluate(
        truths,
        load_run(engine, run_id),
        revenue_tolerance=revenue_tolerance,
        title_threshold=title_threshold,
        grounded_only=grounded_only,
    )
    if as_json:
        click.echo(json.dumps({"run_id": run_id, **result.as_dict()}, indent=2))
        return
    _print_eval(run_id, result.as_dict())


def _print_eval(run_id: str, data: dict[str, Any]) -> None:
    def mark(value: object) -> str:
        return "yes" if value is True else "no" if value is False else "" if value is None else f"{value:.2f}"

    columns = [
        "filing",
        "company",
        "company (norm.)",
        "fiscal year",
        "revenue",
        "risk recall",
        "risk precision",
    ]
    title = f"eval of run {run_id} (revenue within {data['revenue_tolerance']:.1%}" + (
        ", grounded facts only)" if data["grounded_only"] else ")"
    )
    table = Table(*columns, title=title)
    for f in data["filings"]:
        name = escape(f["filename"]) + ("" if f["found"] else " (not in run)")
        keys = [
            "company_exact",
            "company_normalised",
            "fiscal_year",
            "revenue",
            "risk_recall",
            "risk_precision",
        ]
        table.add_row(name, *(mark(f[k]) for k in keys))
    overall = data["overall"]
    table.add_section()
    table.add_row(
        f"overall ({overall['found']} of {overall['filings']} found)",
        *(
            mark(overall[k])
            for k in [
                "company_exact",
                "company_normalised",
                "fiscal_year",
                "revenue",
                "risk_recall",
                "risk_precision",
            ]
        ),
    )
    Console(width=160).print(table)
    if data["unscored"]:
        console.print(f"not in the truth file, not scored: {escape(', '.join(data['unscored']))}")


# -- monitoring --------------------------------------------------------------------------


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
    """Start Flower, the web monitor of workers and tasks, with basic auth from
    PIPELINE_FLOWER_USER / PIPELINE_FLOWER_PASSWORD. Prometheus metrics at /metrics."""
    from pipeline.core.errors import ConfigError
    from pipeline.runs.monitoring import BASIC_AUTH_ENV, METRICS_PATH, basic_auth, flower_argv

    settings = _broker_settings()
    try:
        credentials = basic_auth(settings, unauthenticated=unauthenticated)
    except ConfigError as exc:
        _fail(str(exc))
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
    console.print(f"Flower on http://{escape(address)}:{port}/ (Prometheus metrics at {METRICS_PATH})")
    from workers.app import app

    sys.exit(app.start(flower_argv(address, port)) or 0)


# -- the simulator and the all-in-one ----------------------------------------------------


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8900, show_default=True, help="0 picks a free port.")
@click.option("--p50", default=0.05, show_default=True, help="Median latency, seconds.")
@click.option("--p95", default=0.2, show_default=True, help="95th percentile latency, seconds.")
@click.option("--seed", type=int, default=None)
@click.option("--rpm", default=0, show_default=True, help="Provider requests/min limit (0: none).")
@click.option("--tpm", default=0, show_default=True, help="Provider tokens/min limit (0: none).")
@click.option("--window-s", default=60.0, show_default=True, help="The provider's sliding window, seconds.")
@click.option("--error-rate", default=0.0, show_default=True)
@click.option("--drop-rate", default=0.0, show_default=True)
@click.option("--hang-rate", default=0.0, show_default=True)
@click.option("--bad-json-rate", default=0.0, show_default=True)
@click.option("--truncate-rate", default=0.0, show_default=True)
@click.option(
    "--ungrounded-rate",
    default=0.0,
    show_default=True,
    help="Share of quotes replaced by text not in the document (deterministic with --seed).",
)
@click.option(
    "--record",
    "record_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append every request as a JSON line to this file.",
)
def sim(
    host: str,
    port: int,
    p50: float,
    p95: float,
    seed: int | None,
    rpm: int,
    tpm: int,
    window_s: float,
    error_rate: float,
    drop_rate: float,
    hang_rate: float,
    bad_json_rate: float,
    truncate_rate: float,
    ungrounded_rate: float,
    record_path: str | None,
) -> None:
    """Run the OpenAI-compatible LLM simulator (tests, dry runs, benchmarks)."""
    from pipeline_dev.sim import SimConfig, serve

    config = SimConfig(
        p50_s=p50,
        p95_s=p95,
        seed=seed,
        rpm=rpm,
        tpm=tpm,
        window_s=window_s,
        error_rate=error_rate,
        drop_rate=drop_rate,
        hang_rate=hang_rate,
        bad_json_rate=bad_json_rate,
        truncate_rate=truncate_rate,
        ungrounded_rate=ungrounded_rate,
        record_path=record_path,
    )
    serve(host, port, config)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--query", help="The question the run's report answers.")
@click.option("--name", help="A name for the run.")
@click.option("--workers", "worker_count", default=2, show_default=True, help="Local worker processes.")
@click.option("--fresh", is_flag=True, help="Ask the LLM again for filings answered by earlier runs.")
@click.option(
    "--schema",
    "schema",
    metavar="MODULE:MODEL",
    help="Extract with this pydantic model instead of the 10-K schema.",
)
def run(
    paths: tuple[str, ...],
    query: str | None,
    name: str | None,
    worker_count: int,
    fresh: bool,
    schema: str | None,
) -> None:
    """Run a whole batch locally: embedded Redis, simulator and workers unless configured."""
    from pipeline.runtime.local import local_stack

    with local_stack(get_settings(), worker_count, console) as parts:
        code, run_id = _submit_and_wait(
            parts.settings,
            list(paths),
            query=query,
            name=name,
            wait=True,
            fresh=fresh,
            schema=schema,
            simulated=parts.simulated,
            check=parts.stack.problem,
        )
        _write_report_files(parts.settings, run_id)
    sys.exit(code)


def _write_report_files(settings: Settings, run_id: str) -> None:
    from sqlalchemy import select

    from pipeline.storage.db import session_scope
    from pipeline.storage.models import Report

    with session_scope(_engine(settings)) as session:
        row = session.scalar(select(Report).where(Report.run_id == run_id))
        if row is None:
            return
        out = settings.data_dir.resolve() / "reports"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{run_id}.md").write_text(row.markdown, encoding="utf-8")
        (out / f"{run_id}.json").write_text(json.dumps(row.json, indent=2), encoding="utf-8")
    console.print(f"report: {out / f'{run_id}.md'} (and .json)")


@main.command()
@click.option("--regimes", default="R1,R2,R3,R4,R5,R6,peer-R1,peer-R4", show_default=True)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".pipeline/bench"),
    show_default=True,
)
@click.option("--scale", default=1.0, show_default=True, help="Multiplies every regime's document count.")
@click.option("--window-s", default=60.0, show_default=True, help="The simulated provider's window.")
@click.option("--rpm", default=300, show_default=True, help="The simulated provider's requests per window.")
@click.option(
    "--p50", default=1.42, show_default=True, help="Median latency of the rate- and latency-bound regimes."
)
@click.option("--p95", default=3.81, show_default=True, help="Their 95th percentile latency.")
def bench(
    regimes: str, out_dir: Path, scale: float, window_s: float, rpm: int, p50: float, p95: float
) -> None:
    """Measure the pipeline against the provider's limit and against the peer, side by side.

    Uses PIPELINE_DATABASE_URL when set (else a SQLite file), a private Redis, and the simulator.
    """
    from pipeline_dev.bench.main import run_bench

    names = [r.strip() for r in regimes.split(",") if r.strip()]
    try:
        run_bench(
            names,
            out_dir=out_dir,
            database_url=get_settings().database_url,
            scale=scale,
            window_s=window_s,
            rpm=rpm,
            p50_s=p50,
            p95_s=p95,
            say=lambda line: console.print(escape(line)),
        )
    except ValueError as exc:
        _fail(str(exc))
    click.echo((out_dir / "bench.md").read_text())
