"""What every command group shares: the `main` group, the console, settings and engine helpers,
and how a followed run's outcome is printed."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urlsplit

import click
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from pipeline import __version__
from pipeline.core import exits, redaction
from pipeline.core.settings import Settings, get_settings, unread_variables

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from pipeline.runs.failures import FailureGroup
    from pipeline.runs.status import RunStatusView

console = Console(stderr=True, soft_wrap=True)


def open_engine(settings: Settings) -> Engine:
    from pipeline.storage.db import ensure_schema

    return ensure_schema(settings.resolved_database_url)


def ping_broker(settings: Settings) -> None:
    """Raise redis' ConnectionError (which `explain` turns into a sentence, exit 3) unless the
    broker answers within seconds: nothing is stored for a run its broker cannot take."""
    import redis

    if not settings.redis_url:
        return
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
    try:
        client.ping()
    finally:
        client.close()


def broker_settings(hint: str = "") -> Settings:
    """The settings, for a command that needs the broker: exits 2 when none is configured."""
    settings = get_settings()
    if not settings.redis_url:
        fail(f"PIPELINE_REDIS_URL is not set: point it at the broker{hint}")
    return settings


def deployment_settings(command: str) -> Settings:
    """The settings, for a process of a deployment (worker, submit, …): exits 2 unless the broker
    and the database are named. Without PIPELINE_DATABASE_URL each host would fall back to a
    SQLite file of its own, and a worker would never see the producer's documents. Prints the
    process's one line naming what it talks to."""
    settings = broker_settings(", or use `pipeline run` for the embedded all-in-one")
    if not settings.database_url:
        fail(
            f"PIPELINE_DATABASE_URL is not set: `pipeline {command}` must name the database every "
            "process of the deployment shares (postgresql+psycopg://user:password@host:5432/name); "
            "only `pipeline run` uses a local SQLite file"
        )
    announce(command, settings)
    return settings


def announce(command: str, settings: Settings, *, broker_only: bool = False) -> None:
    """One line on stderr: the endpoint (host only), database and broker this process uses (the
    broker alone for beat and Flower, which talk to nothing else), and where each setting came
    from (environment, .env, default)."""
    parts = talks_to(settings)
    console.print(
        f"pipeline {command}: {escape(parts[-1] if broker_only else ', '.join(parts))}", highlight=False
    )


def warn_unread_variables() -> None:
    """A warning line per PIPELINE_ variable of the environment or `.env` that no setting reads
    (misspelt: naming the closest setting; removed: what replaced it). Every command says it, once,
    before it starts: a `pipeline plan` that silently ignored PIPELINE_RATE_LIMT_RPM priced the
    run at the wrong rate, and exited 0."""
    for sentence in unread_variables([*os.environ, *env_file_variables()]):
        console.print(f"[yellow]warning:[/] {escape(sentence)}", highlight=False)


def env_file_variables() -> list[str]:
    """The names `.env` in the working directory sets (none without one)."""
    env_file = Path(".env")
    if not env_file.is_file():
        return []
    from dotenv import dotenv_values

    return list(dotenv_values(env_file))


def talks_to(settings: Settings) -> list[str]:
    """What `settings` point at: endpoint, database, broker, each with its setting's source."""
    from pipeline.cli.explain import redis_label
    from pipeline.core.errors import database_label

    endpoint = (
        urlsplit(settings.llm_base_url).netloc.rpartition("@")[2]
        if settings.llm_base_url
        else "the simulator"
    )
    return [
        f"endpoint {endpoint} ({setting_source('PIPELINE_LLM_BASE_URL', 'OPENAI_BASE_URL')})",
        f"database {database_label(settings.resolved_database_url)} ({setting_source('PIPELINE_DATABASE_URL')})",
        f"broker {redis_label(settings.redis_url)} ({setting_source('PIPELINE_REDIS_URL')})",
    ]


def setting_source(*names: str) -> str:
    """Where the first of `names` that is set comes from: "environment", ".env" or "default"
    (the order pydantic-settings reads them in; names are case-insensitive, as it reads them)."""
    wanted = {name.upper() for name in names}
    if any(key.upper() in wanted for key in os.environ):  # even blank: it overrides .env
        return "environment"
    env_file = Path(".env")
    if env_file.is_file():
        from dotenv import dotenv_values

        if any(
            key.upper() in wanted and (value or "").strip() for key, value in dotenv_values(env_file).items()
        ):
            return ".env"
    return "default"


def fail(message: str, code: int = 2) -> NoReturn:
    console.print(f"[bold red]error:[/] {escape(redaction.redact(message))}")
    sys.exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C is, so that a command ends what it started
    (its `with` blocks) on the way out."""


_sigterm_pending = False
"""SIGTERM came and its `Terminated` may not have reached the command: see raise_if_terminated."""


def stop_on_sigterm() -> None:
    """Turn SIGTERM into `Terminated` for this command (`pipeline run`, `submit --wait`)."""

    def terminated(signum: int, frame: object) -> None:
        global _sigterm_pending
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the way out is under way
        _sigterm_pending = True
        raise Terminated

    signal.signal(signal.SIGTERM, terminated)


def raise_if_terminated() -> None:
    """Raise the `Terminated` of a SIGTERM that did not reach the command. A signal handler's
    exception is raised wherever the main thread is, and where that is a weakref callback or a
    `__del__` (importlib's module locks have one), Python prints it as ignored and goes on: a
    `pipeline run` went on to its end after SIGTERM. Waiting loops call this at each poll."""
    global _sigterm_pending
    if _sigterm_pending:
        _sigterm_pending = False
        raise Terminated


def stopped_by(exc: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C (SIGINT)"


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that `exc` was raised from or while handling."""
    seen: set[int] = set()
    found: BaseException | None = exc
    while found is not None and id(found) not in seen:
        if isinstance(found, KeyboardInterrupt):
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


@contextmanager
def interrupts_unwrapped() -> Iterator[None]:
    """Raise again as itself a Ctrl-C or SIGTERM that Python wrapped in another error, so that
    the `except KeyboardInterrupt` around this block ends what the command started. A signal
    handler's exception that lands in a class's creation (a descriptor's `__set_name__`, as a
    lazy import builds classes) comes out as a RuntimeError ("Error calling `__set_name__` ...")
    caused by it: a `pipeline run` stopped so exited 70, an internal error, its run unmarked."""
    try:
        yield
    except Exception as exc:
        interrupt = _interrupt_behind(exc)
        if interrupt is None:
            raise
        raise interrupt from None


HELP_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Run a batch", ("run", "submit", "status", "report", "runs", "eval", "review")),
    ("Repair a run", ("resume", "retry", "cancel")),
    ("Deploy and operate", ("doctor", "db", "worker", "beat", "watchdog", "flower", "prune")),
    ("Develop", ("sim", "bench")),
)
"""`pipeline --help` in the order of the work: a batch from start to report, then what repairs
a run, then a deployment's processes, then the dev tools. A command not named here is listed
last, under "Other commands"."""


def workflow_order(names: list[str]) -> list[str]:
    """`names` in HELP_SECTIONS' order, the unknown ones last, alphabetically."""
    rank = {name: i for i, name in enumerate(name for _, names in HELP_SECTIONS for name in names)}
    return sorted(names, key=lambda name: (rank.get(name, len(rank)), name))


def first_sentence(command: click.Command) -> str:
    """A command's line in `pipeline --help`: its first sentence, whole (a long one wraps
    instead of ending in "...")."""
    if command.short_help:
        return command.short_help
    paragraph = " ".join((command.help or "").split("\n\n", 1)[0].split())
    end = re.search(r"\.(\s|$)", paragraph)
    return paragraph[: end.start() + 1] if end else paragraph


class PipelineGroup(click.Group):
    """The `pipeline` group: its help lists the commands by workflow (HELP_SECTIONS), and a
    command that fails on something outside it (a server down, a path that cannot be written)
    ends with one sentence and an exit code, not a traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return workflow_order(super().list_commands(ctx))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = {
            name: command
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        }
        if not commands:
            return
        width = max(len(name) for name in commands)  # one column for every section
        known = {name for _, names in HELP_SECTIONS for name in names}
        sections = [*HELP_SECTIONS, ("Other commands", tuple(n for n in commands if n not in known))]
        for title, names in sections:
            rows = [(n.ljust(width), first_sentence(commands[n])) for n in names if n in commands]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> object:
        try:
            with interrupts_unwrapped():
                return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt as exc:
            fail(f"stopped by {stopped_by(exc)}", exits.INTERRUPTED)
        except Exception as exc:
            if ctx.meta.get("pipeline.debug"):
                raise
            from pipeline.cli.explain import explain

            try:
                settings: Settings | None = get_settings()
            except ValidationError:
                settings = None
            said = explain(exc, settings)
            fail(said.message, said.code)


@click.group(cls=PipelineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__)
@click.option("--debug", is_flag=True, help="Show the traceback of an error instead of its sentence.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Batch LLM extraction over filings: submit, work, report.

    `pipeline run FILES` does it all on this machine. A deployment runs `pipeline worker` on
    each host and one `pipeline beat`, then `pipeline submit FILES --wait`; `pipeline status`
    shows where a run stands."""
    ctx.meta["pipeline.debug"] = debug
    redaction.install_logging()  # before anything logs: every record of the command, redacted
    try:
        get_settings()
    except ValidationError as exc:
        # Every command, a worker above all, refuses to start on a setting that cannot work.
        problems = "; ".join(_setting_problem(e["loc"], e["msg"]) for e in exc.errors())
        warn_unread_variables()  # a misspelt name may be why a setting is missing
        fail(f"bad setting: {problems}")
    warn_unread_variables()
    from pipeline.core import tracing

    if tracing.setup(f"pipeline-{ctx.invoked_subcommand or 'cli'}"):  # OTEL_EXPORTER_OTLP_ENDPOINT set
        ctx.call_on_close(tracing.flush)


def _setting_problem(loc: tuple[int | str, ...], message: str) -> str:
    message = message.removeprefix("Value error, ")
    name = "_".join(map(str, loc)).upper()
    name = name if name.startswith(("PIPELINE_", "OPENAI_")) else f"PIPELINE_{name}"  # an alias
    return message if message.startswith(name) else f"{name}: {message}"


def outcome(view: RunStatusView, failures: list[FailureGroup]) -> int:
    """Print how a followed run ended: `pipeline status`'s summary line, its calls and cost,
    why documents were not extracted (grouped and counted) and the run's error; its exit code:
    0 only for a completed run with its report."""
    from pipeline.cli.status_page import (
        FAILURE_ROWS,
        cost_line,
        example_paths,
        failure_line,
        summary_line,
    )

    tokens = view.prompt_tokens + view.completion_tokens
    failed = f" ({view.llm_calls_failed:,} failed)" if view.llm_calls_failed else ""
    console.print(f"[bold]{escape(summary_line(view))}[/]", highlight=False)
    console.print(
        f"{view.llm_calls:,} LLM calls{failed}, {tokens:,} tokens, {escape(cost_line(view))}",
        highlight=False,
    )
    for group in failures[:FAILURE_ROWS]:
        console.print(
            f"  {escape(failure_line(group))} (e.g. {escape(example_paths(group))})", highlight=False
        )
    if len(failures) > FAILURE_ROWS:
        console.print(f"  … and {len(failures) - FAILURE_ROWS} other reasons: pipeline status {view.run_id}")
    if view.error:
        console.print(f"[bold red]run failed:[/] {escape(view.error)}")
    return 0 if view.has_report and view.status == "completed" else 1
