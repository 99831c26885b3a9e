"""Submitting runs: `pipeline submit` (and the submit that `pipeline run` makes), `resume`, and
the options they share with `run` (`--follow-links`, `--mode`, `--deadline`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.markup import escape

from pipeline.cli.base import (
    console,
    deployment_settings,
    fail,
    interrupts_unwrapped,
    main,
    open_engine,
    ping_broker,
    stop_on_sigterm,
    stopped_by,
)
from pipeline.cli.follow import RunInterrupted, follow
from pipeline.core import exits
from pipeline.core.settings import Settings, get_settings

F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.ingest.producer import SubmitPlan


def links_option(command: F) -> F:
    """`--follow-links`, for `submit` and `run`."""
    return click.option(
        "--follow-links/--no-follow-links",
        default=None,
        help="Read a symbolic link when it resolves under the directory named: a directory PATH, a "
        "glob's directories before its first wildcard, or the directory holding a file PATH (so "
        "`dir/*.txt` expanded by the shell reads links into dir only). Without it every link is "
        "skipped with the reason, as special files are [default: PIPELINE_FOLLOW_LINKS, off].",
    )(command)


def with_links(settings: Settings, follow_links: bool | None) -> Settings:
    """`settings` with `--follow-links` or `--no-follow-links` applied."""
    if follow_links is None or follow_links == settings.follow_links:
        return settings
    return settings.model_copy(update={"follow_links": follow_links})


def mode_options(command: F) -> F:
    """`--mode` and `--deadline`, for `submit` and `run`."""
    command = click.option(
        "--deadline",
        default=None,
        help="When the report must be there: a time of day (06:00, next one) or an ISO timestamp "
        "[default: PIPELINE_RUN_DEADLINE].",
    )(command)
    return click.option(
        "--mode",
        type=click.Choice(["sync", "flex", "batch", "auto"]),
        default=None,
        help="sync: HTTP calls under the global limit; flex: the same calls at flex processing's tier "
        "(batch prices, slower; extractions only); batch: the provider's Batch API (half price), "
        "then sync for what it has not answered by the deadline; auto: batch when the deadline "
        "leaves room [default: PIPELINE_LLM_MODE, sync].",
    )(command)


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
@click.option(
    "--dry-run", is_flag=True, help="Print what the run would cost and take (`pipeline plan`); send nothing."
)
@links_option
@mode_options
def submit(
    paths: tuple[str, ...],
    query: str | None,
    name: str | None,
    wait: bool,
    fresh: bool,
    schema: str | None,
    new_only: bool,
    dry_run: bool,
    follow_links: bool | None,
    mode: str | None,
    deadline: str | None,
) -> None:
    """Submit files (paths, globs, directories) as one run.

    Prints the run id on stdout. With --wait, follows the run and ends with its summary, why
    documents were not extracted, and the report's path (under PIPELINE_DATA_DIR/reports)."""
    if dry_run:
        from pipeline.cli.plan import show_plan

        settings = with_links(with_mode(get_settings(), mode, deadline), follow_links)
        sys.exit(show_plan(settings, list(paths), as_json=False, reuse=not fresh and not schema))
    settings = with_links(with_mode(deployment_settings("submit"), mode, deadline), follow_links)
    if wait:
        stop_on_sigterm()
    code, _ = submit_and_wait(
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


def submit_and_wait(
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
    from pipeline.cli.celery_app import connect_in_background, enqueue_early, start_run
    from pipeline.ingest.producer import new_run_id, prepare_run
    from pipeline.runs.mode import SENT_AT_ONCE, fix_deadline
    from pipeline.runtime import reading_pool

    if schema:
        _check_schema(schema)
    ping_broker(settings)  # a run is created only once its broker answered
    _count_tokens_soon(settings)
    connect_in_background()
    engine = open_engine(settings)
    # Once, before the files are stored: "06:00" stays the instant it named at the start.
    settings = fix_deadline(engine, settings, deadline_source(settings))
    run_id = new_run_id()
    try:
        with interrupts_unwrapped():
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
                on_early=enqueue_early
                if settings.llm_mode in SENT_AT_ONCE
                else None,  # batch: one file, at the end
                run_id=run_id,
                reader=reading_pool.reader(settings),
            )
    except KeyboardInterrupt as exc:
        _abandon(engine, run_id, f"`pipeline submit`, stopped by {stopped_by(exc)} as it stored its files")
        raise
    refused = _refused(plan, paths)
    if refused is not None:
        if plan.created and not plan.submitted:  # nothing to run: no run left behind
            _discard(engine, plan.run_id)
        return refused
    try:
        with interrupts_unwrapped():
            mode = start_run(engine, settings, plan)
            _say_layout(settings)
            submitted = f"submitted {plan.submitted} documents" + (" (batch mode)" if mode == "batch" else "")
            if not wait:
                console.print(submitted)
                _warn_without_workers(settings, plan.run_id)
                click.echo(plan.run_id)
                return 0, plan.run_id
            # Followed, the run id is on stderr at once (to follow it elsewhere) and on stdout last,
            # after the summary: the last line, as when not followed, and stdout's only one.
            console.print(f"{submitted}: run {plan.run_id}")
            try:
                return follow(engine, plan.run_id, check), plan.run_id
            finally:
                click.echo(plan.run_id)
    except KeyboardInterrupt as exc:
        if check is None or isinstance(exc, RunInterrupted):
            raise
        raise RunInterrupted(plan.run_id, stopped_by(exc)) from None  # `pipeline run` marks it


def _count_tokens_soon(settings: Settings) -> None:
    """Build the token encoding the first files' chunks are counted with (o200k_base: about half
    a second) on a thread of its own, while the broker and the database answer, instead of once
    the first file is read. Its build lock makes the first count wait for it, not build another."""
    from pipeline.llm.tokens import counter_for

    threading.Thread(
        target=counter_for, args=(settings.llm_model,), name="pipeline-token-encoding", daemon=True
    ).start()


def _say_layout(settings: Settings) -> None:
    """Under PIPELINE_PROMPT_LAYOUT=auto, which layout the run is asked in and why (once)."""
    if settings.prompt_layout == "auto":
        from pipeline.extraction.layout_choice import chosen

        console.print(escape(chosen(settings).reason))


def _warn_without_workers(settings: Settings, run_id: str) -> None:
    """A warning when no worker's heartbeat is in the broker the run was sent to: the run waits,
    and a submit that exits 0 would not say so (`--wait` names it as stuck, exit 4). Nothing
    when the heartbeats cannot be read (the broker took the run: it answered a moment ago)."""
    from pipeline.cli.explain import redis_label
    from pipeline.recovery.heartbeat import live_workers_at

    if settings.redis_url and live_workers_at(settings.redis_url) == []:
        console.print(
            f"[yellow]warning:[/] no live worker was seen on the broker {escape(redis_label(settings.redis_url))}: "
            "the run waits until `pipeline worker` runs with this PIPELINE_REDIS_URL and "
            f"PIPELINE_DATABASE_URL (`pipeline status {run_id}` shows the workers)",
            highlight=False,
        )


def deadline_source(settings: Settings) -> str:
    """Who gave the run's deadline: PIPELINE_RUN_DEADLINE when the settings read from the
    environment (or .env) hold the same, else `--deadline`."""
    given = (settings.run_deadline or "").strip()
    return "PIPELINE_RUN_DEADLINE" if given == (get_settings().run_deadline or "") else "--deadline"


def with_mode(settings: Settings, mode: str | None, deadline: str | None) -> Settings:
    """`settings` with `--mode` and `--deadline` applied; exit 2 naming a deadline that does not parse."""
    from pipeline.core.deadline import parse_deadline

    update: dict[str, str] = {}
    if mode:
        update["llm_mode"] = mode
    if deadline:
        try:
            parse_deadline(deadline)
        except ValueError as exc:
            fail(f"--deadline: {exc}")
        update["run_deadline"] = deadline
    return settings.model_copy(update=update) if update else settings


def _check_schema(schema: str) -> None:
    """Exit 2 with the reason when `--schema` names a model that cannot be used."""
    from pipeline.extraction.custom import load_schema

    try:
        load_schema(schema)
    except ValueError as exc:
        fail(str(exc))


def _refused(plan: SubmitPlan, paths: list[str]) -> tuple[int, str] | None:
    """Say what the plan left out; the exit code and run id when there is nothing to enqueue."""
    if plan.already_processed:
        console.print(f"{len(plan.already_processed)} files left out: an earlier run extracted them")
    if not plan.created:
        console.print("nothing new to submit")
        return 0, ""
    for path, reason in plan.rejected:
        console.print(f"[yellow]skipped[/] {escape(path)}: {escape(reason)}")
    if not plan.submitted:
        console.print(
            f"[bold red]error:[/] no usable document in {escape(' '.join(paths))}; no run was started"
        )
        return exits.USAGE, ""
    return None


def _abandon(engine: Engine, run_id: str, why: str) -> None:
    """A run that will not go on: removed when it holds no document (nothing to account for),
    cancelled by `why` otherwise, as `pipeline cancel` does (its first documents may be with
    workers already: they stop before their next call)."""
    from pipeline.cli.repair import cancel_and_report, stop_flags
    from pipeline.storage import intake, run_state
    from pipeline.storage.db import session_scope

    with session_scope(engine) as session:
        stored = sum(run_state.status_counts(session, run_id).values())
        if not stored:
            intake.delete_run(session, run_id)
            return
    settings = get_settings()
    cancel_and_report(engine, settings, run_id, why, stop_flags(settings))


def _discard(engine: Engine, run_id: str) -> None:
    """Remove a run that never started: no usable document (each reason was printed)."""
    from pipeline.storage import intake
    from pipeline.storage.db import session_scope

    with session_scope(engine) as session:
        intake.delete_run(session, run_id)


@main.command()
@click.argument("run", required=False)
@click.option(
    "--stale-after-s",
    default=600.0,
    show_default=True,
    help="Re-enqueue running documents without progress for this long.",
)
@click.option("--wait", is_flag=True, help="Show progress until the run ends.")
def resume(run: str | None, stale_after_s: float, wait: bool) -> None:
    """Finish an interrupted RUN (default: the newest).

    Enqueues its unfinished documents again, then finalizes it."""
    from pipeline.cli.celery_app import enqueue_resume
    from pipeline.runs.resume import plan_resume
    from pipeline.runs.status import UnknownRun, resolve_run_id

    settings = deployment_settings("resume")
    engine = open_engine(settings)
    try:
        run_id = resolve_run_id(engine, run)
    except UnknownRun as exc:
        fail(str(exc))
    plan = plan_resume(engine, run_id, stale_after_s)
    if plan.has_report:
        console.print(
            f"run {run_id} has its report: nothing to resume "
            f"(its failed or cancelled documents: `pipeline retry {run_id}`)"
        )
        sys.exit(0)
    enqueue_resume(plan)
    console.print(
        f"resumed {run_id}: {len(plan.document_ids)} documents enqueued again"
        + (f", {plan.left_running} still running elsewhere" if plan.left_running else "")
    )
    if not wait:
        sys.exit(0)
    sys.exit(follow(engine, run_id))
