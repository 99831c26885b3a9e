"""`pipeline run`: a whole batch on this machine, all in one command (an embedded Redis, the
simulator and local workers, started and stopped with it)."""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

import click
from rich.markup import escape

from pipeline.cli.base import (
    console,
    fail,
    interrupts_unwrapped,
    main,
    open_engine,
    setting_source,
    stop_on_sigterm,
    stopped_by,
)
from pipeline.cli.follow import RunInterrupted, write_report_files
from pipeline.cli.submit import links_option, mode_options, submit_and_wait, with_links, with_mode
from pipeline.core import exits
from pipeline.core.settings import Settings, get_settings


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
@click.option(
    "--yes",
    is_flag=True,
    help="Go ahead when the configured LLM endpoint is not on this machine (it may cost money).",
)
@links_option
@mode_options
def run(
    paths: tuple[str, ...],
    query: str | None,
    name: str | None,
    worker_count: int,
    fresh: bool,
    schema: str | None,
    yes: bool,
    follow_links: bool | None,
    mode: str | None,
    deadline: str | None,
) -> None:
    """Run a whole batch on this machine, all in one command.

    Starts an embedded Redis, the simulator and local workers unless configured, and writes
    the report under PIPELINE_DATA_DIR/reports."""
    from pipeline.runtime.local import local_stack

    settings = with_mode(get_settings(), mode, deadline)  # a bad deadline fails before anything starts
    if settings.llm_base_url:
        _check_endpoint(settings, yes)
    stop_on_sigterm()
    try:
        with interrupts_unwrapped(), local_stack(settings, worker_count, console) as parts:
            code, run_id = submit_and_wait(
                with_links(with_mode(parts.settings, mode, deadline), follow_links),
                list(paths),
                query=query,
                name=name,
                wait=True,
                fresh=fresh,
                schema=schema,
                simulated=parts.simulated,
                check=parts.stack.problem,
            )
            write_report_files(parts.settings, run_id)
    except RunInterrupted as stop:  # the parts are stopped: the run is marked in the database
        _cancel(settings, stop.run_id, stop.how)
        sys.exit(exits.INTERRUPTED)
    except KeyboardInterrupt as exc:  # while the parts started or the files were stored
        fail(f"stopped by {stopped_by(exc)}; the local workers and Redis are stopped", exits.INTERRUPTED)
    sys.exit(code)


def _check_endpoint(settings: Settings, yes: bool) -> None:
    """Name the endpoint `pipeline run` will use; without `--yes`, exit 2 before anything starts
    when it is not on this machine: a `.env` written for compose must not turn the quick start
    into a paid run without a word."""
    host = urlsplit(settings.llm_base_url or "").hostname or ""
    source = setting_source("PIPELINE_LLM_BASE_URL", "OPENAI_BASE_URL")
    where = f"{host} (PIPELINE_LLM_BASE_URL from {source})"
    if _on_this_machine(host):
        console.print(f"LLM endpoint: {escape(where)}")
        return
    if not yes:
        fail(
            f"pipeline run would send the filings to {where}, a real provider that may charge for "
            "them: pass --yes to go ahead, or run `PIPELINE_LLM_BASE_URL= pipeline run …` for the built-in simulator"
        )
    console.print(f"[bold]LLM endpoint: {escape(where)}[/] (--yes given)")


def _on_this_machine(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cancel(settings: Settings, run_id: str, how: str) -> None:
    """Cancel the run `pipeline run` was following, as `pipeline cancel` does, its workers and
    embedded Redis being stopped already (so no flag is set: nothing is left to check it); its
    report of what was done is written, with the files."""
    from pipeline.cli.repair import cancel_and_report

    engine = open_engine(settings)
    again = "run the same command again: what was extracted is reused"
    outcome = cancel_and_report(
        engine, settings, run_id, f"`pipeline run`, stopped by {how}", None, hint=again
    )
    console.print(
        f"[bold red]run {run_id} cancelled:[/] pipeline run was stopped by {how} with {outcome.extracted} "
        f"of {outcome.total} documents extracted; {again}"
    )
    write_report_files(settings, run_id)
