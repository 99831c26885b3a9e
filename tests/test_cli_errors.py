"""An operator's ordinary mistakes, as the CLI answers them: one sentence naming the setting or
the server and the fix, an exit code from the documented table, no traceback (unless
`--debug`), and nothing stored for a run its broker cannot take."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import delete, func, make_url, select, text

from pipeline.core import exits
from pipeline.runtime.embedded import child_env, free_port
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Run
from pipeline_dev.synth_filings import write_filings
from tests.conftest import run_cli


def _said(result: subprocess.CompletedProcess[str], code: int, *parts: str) -> None:
    """`result` exited `code` with one error line holding `parts`, and no traceback."""
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for part in parts:
        assert part in errors[0], errors[0]


@pytest.fixture(scope="module")
def closed_port() -> int:
    return free_port()  # nothing listens there


def test_a_database_that_does_not_answer_is_named_with_exit_3(
    pipeline_env: dict[str, str], closed_port: int
) -> None:
    url = f"postgresql+psycopg://postgres:s3cret-pw@127.0.0.1:{closed_port}/test"
    result = run_cli("status", env={"PIPELINE_DATABASE_URL": url})
    _said(
        result,
        exits.UNREACHABLE,
        f"the database 127.0.0.1:{closed_port}/test did not answer",
        "PIPELINE_DATABASE_URL",
    )
    assert "s3cret-pw" not in result.stderr


def test_a_database_with_no_connection_free_is_full_with_exit_3_not_a_credentials_problem(
    postgres_url: str | None,
) -> None:
    if postgres_url is None:
        pytest.skip("no Postgres server reachable (CI always has one)")
    # A role whose connection limit is reached is refused as a full server is (SQLSTATE 53300),
    # without filling the shared server's own max_connections.
    role = f"full_{uuid.uuid4().hex[:10]}"
    admin = get_engine(postgres_url)
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}' CONNECTION LIMIT 0"))
        conn.commit()
    try:
        url = make_url(postgres_url).set(
            drivername="postgresql+psycopg", username=role, password=f"pw-{role}"
        )
        result = run_cli("status", env={"PIPELINE_DATABASE_URL": url.render_as_string(hide_password=False)})
        _said(
            result, exits.UNREACHABLE, "is full: it has no connection free", "too many connections for role"
        )
        assert "fix the user, password" not in result.stderr
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP ROLE {role}"))
            conn.commit()


def test_debug_shows_the_traceback_instead(pipeline_env: dict[str, str], closed_port: int) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{closed_port}/test"
    result = run_cli("--debug", "status", env={"PIPELINE_DATABASE_URL": url})
    assert result.returncode != 0 and "Traceback" in result.stderr


@pytest.mark.parametrize(
    ("setting", "value", "said"),
    [
        ("PIPELINE_DATABASE_URL", "notaurl", "PIPELINE_DATABASE_URL is not a database URL"),
        ("PIPELINE_REDIS_URL", "http://127.0.0.1:6379", "PIPELINE_REDIS_URL is not a Redis URL"),
        ("PIPELINE_LLM_BASE_URL", "api.openai.com/v1", "PIPELINE_LLM_BASE_URL is not an HTTP URL"),
    ],
)
def test_a_url_that_cannot_work_is_a_bad_setting(
    pipeline_env: dict[str, str], setting: str, value: str, said: str
) -> None:
    _said(run_cli("runs", env={setting: value}), exits.USAGE, "bad setting: ", said)


def test_submit_with_the_broker_down_stores_no_run(
    pipeline_env: dict[str, str], closed_port: int, tmp_path: Path
) -> None:
    write_filings(tmp_path, 1, seed=91, sizes=[21_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        before = session.scalar(select(func.count()).select_from(Run))
    result = run_cli(
        "submit",
        str(tmp_path),
        env={"PIPELINE_REDIS_URL": f"redis://127.0.0.1:{closed_port}/0"},
        timeout_s=60,
    )
    _said(
        result,
        exits.UNREACHABLE,
        f"the broker (Redis) at 127.0.0.1:{closed_port}/0 did not answer",
        "PIPELINE_REDIS_URL",
    )
    assert result.stdout == ""  # no run id for `RUN=$(pipeline submit …)`
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Run)) == before


PAST = "2026-01-02T06:00:00+00:00"


@pytest.mark.parametrize(
    ("command", "option", "env", "source"),
    [
        ("submit", ("--deadline", PAST), {}, "--deadline"),
        ("submit", (), {"PIPELINE_RUN_DEADLINE": PAST}, "PIPELINE_RUN_DEADLINE"),
        ("plan", ("--deadline", PAST), {}, "--deadline"),
    ],
)
def test_a_deadline_already_past_is_refused_with_exit_2_and_stores_no_run(
    pipeline_env: dict[str, str],
    tmp_path: Path,
    command: str,
    option: tuple[str, ...],
    env: dict[str, str],
    source: str,
) -> None:
    """Issue 47: a deadline already past was accepted without a word and planned as sync (at
    full price, with no outage waited out). It is refused before anything is stored, naming
    who gave it and the fix."""
    write_filings(tmp_path, 1, seed=92, sizes=[6_000])
    engine = get_engine(pipeline_env["PIPELINE_DATABASE_URL"])
    with session_scope(engine) as session:
        before = session.scalar(select(func.count()).select_from(Run))
    result = run_cli(command, str(tmp_path), *option, env=env, timeout_s=60)
    _said(result, exits.USAGE, f"{source} {PAST} is already past", f"or leave {source} out")
    assert result.stdout == ""
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Run)) == before


def test_status_with_the_broker_down_shows_what_the_database_holds(
    pipeline_env: dict[str, str], closed_port: int, tmp_path: Path
) -> None:
    from pipeline.core.settings import get_settings
    from pipeline.ingest.producer import prepare_run

    write_filings(tmp_path, 1, seed=92, sizes=[21_000])
    plan = prepare_run(get_engine(pipeline_env["PIPELINE_DATABASE_URL"]), get_settings(), [str(tmp_path)])
    down = {"PIPELINE_REDIS_URL": f"redis://127.0.0.1:{closed_port}/0"}
    try:
        shown = run_cli("status", plan.run_id, "--json", env=down, timeout_s=60)
        assert shown.returncode == 0, shown.stderr
        found = json.loads(shown.stdout)
        assert found["documents_total"] == 1 and found["limiter"] is None
        assert found["broker_problem"].startswith(
            f"127.0.0.1:{closed_port}/0 did not answer (PIPELINE_REDIS_URL)"
        )
        text = run_cli("status", plan.run_id, env=down, timeout_s=60)
        assert text.returncode == 0 and "did not answer" in text.stdout, text.stderr
    finally:  # not left as the newest run, which other tests' `status` would show
        with session_scope(get_engine(pipeline_env["PIPELINE_DATABASE_URL"])) as session:
            session.execute(delete(Run).where(Run.id == plan.run_id))


def test_a_report_into_a_missing_directory_names_it(pipeline_env: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "x.md"
    _said(run_cli("report", "-o", str(target)), exits.USAGE, f"the directory {target.parent} does not exist")


def test_a_deployment_process_refuses_to_start_without_a_database_url(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in pipeline_env.items() if k != "PIPELINE_DATABASE_URL"}
    for command in (["worker"], ["submit", str(tmp_path)], ["resume", "x"]):
        result = run_cli(*command, env={**env, "PIPELINE_DATABASE_URL": ""}, cwd=tmp_path)
        _said(result, exits.USAGE, f"PIPELINE_DATABASE_URL is not set: `pipeline {command[0]}` must name")


@pytest.mark.parametrize("where", ["environment", ".env"])
def test_every_command_warns_once_of_a_misspelt_variable_naming_the_setting(
    pipeline_env: dict[str, str], tmp_path: Path, where: str
) -> None:
    write_filings(tmp_path / "in", 1, seed=93, sizes=[21_000])
    env = {}
    if where == ".env":
        (tmp_path / ".env").write_text("PIPELINE_RATE_LIMT_RPM=5\n")
    else:
        env["PIPELINE_RATE_LIMT_RPM"] = "5"
    warning = (
        "warning: PIPELINE_RATE_LIMT_RPM is not a setting and is ignored "
        "(did you mean PIPELINE_RATE_LIMIT_RPM?)"
    )
    for command in (["plan", str(tmp_path / "in")], ["runs"], ["watchdog"]):
        result = run_cli(*command, env=env, cwd=tmp_path, timeout_s=120)
        assert result.returncode == 0, (command, result.stderr)
        assert result.stderr.splitlines().count(warning) == 1, (command, result.stderr)
    bad = run_cli("runs", env={**env, "PIPELINE_LEASE_S": "-1"}, cwd=tmp_path)
    assert bad.returncode == exits.USAGE and bad.stderr.splitlines().count(warning) == 1, bad.stderr


def test_each_process_names_what_it_talks_to_and_where_that_came_from(
    pipeline_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text("PIPELINE_LLM_BASE_URL=http://127.0.0.1:9/v1\nPIPELINE_LEASE_SECONDS=3\n")
    env = child_env(pipeline_env)
    for name in ("PIPELINE_LLM_BASE_URL", "OPENAI_BASE_URL"):
        env.pop(name, None)  # the endpoint comes from .env alone
    env["PIPELINE_RATE_LIMT_RPM"] = "500"  # misspelt: ignored, and said so
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "watchdog"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    host = pipeline_env["PIPELINE_REDIS_URL"].removeprefix("redis://")
    line = next(x for x in result.stderr.splitlines() if x.startswith("pipeline watchdog:"))
    assert line.startswith("pipeline watchdog: endpoint 127.0.0.1:9 (.env), database "), line
    assert line.endswith(f"(environment), broker {host} (environment)"), line
    warnings = [x for x in result.stderr.splitlines() if x.startswith("warning: PIPELINE_")]
    assert warnings == [
        "warning: PIPELINE_LEASE_SECONDS is not a setting and is ignored (did you mean PIPELINE_LEASE_S?)",
        "warning: PIPELINE_RATE_LIMT_RPM is not a setting and is ignored (did you mean PIPELINE_RATE_LIMIT_RPM?)",
    ], result.stderr
