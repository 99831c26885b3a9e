"""Secrets in the deployment files: none on a command line, placeholders refused, one name for
each setting, env files every reader reads alike (issue 30, finding 5 and 6).

Without a Docker engine, compose's Redis runs for real: the container's command line, built
from docker-compose.yml as compose would (entrypoint, command, environment, secret files), is
started against a private redis-server with a password, and its healthcheck is run against
it. Every program they start goes through a logging stand-in first, so the test sees each
command line (what `ps` and /proc show every user) and finds the password on none.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from dotenv import dotenv_values
from redis.backoff import NoBackoff
from redis.retry import Retry

from pipeline.core.constants import PLACEHOLDER_PASSWORDS
from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings
from pipeline.runs.monitoring import basic_auth
from pipeline.runtime import embedded
from tests.conftest import run_cli
from tests.test_deploy_files import (
    COMPOSE,
    CRONTAB,
    ENV_EXAMPLE,
    FLOWER_ENV,
    FLOWER_UNIT,
    PRESTART,
    ROOT,
    SECRET_NAME,
    dockerfile_json,
    pipeline_services,
    read_unit,
    url_password,
)

_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
_SHELL_REFERENCE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")

IMAGE_ENTRYPOINTS = {
    "redis:7-alpine": ["docker-entrypoint.sh"],
    "postgres:16-alpine": ["docker-entrypoint.sh"],
}
IMAGE_COMMANDS = {"redis:7-alpine": ["redis-server"], "postgres:16-alpine": ["postgres"]}
"""What the official images run when compose names no entrypoint or command (their Dockerfiles)."""

FLOWER_NEEDS = {
    "PIPELINE_REDIS_URL",
    "PIPELINE_LIMITER_REDIS_URL",
    "PIPELINE_FLOWER_USER",
    "PIPELINE_FLOWER_PASSWORD",
    "PIPELINE_FLOWER_ADDRESS",
    "PIPELINE_FLOWER_PORT",
}
"""Everything `pipeline flower` reads: the broker, the circuits' Redis, its login, where it listens."""

ONE_NAME_FILES = [
    COMPOSE,
    ENV_EXAMPLE,
    ROOT / "README.md",
    *sorted((ROOT / "ops").rglob("*")),
    *sorted((ROOT / "docs").glob("*.md")),
]
"""Where a setting must go by its one name."""


def is_secret(name: str) -> bool:
    """A variable holding a secret itself (a *_FILE variable holds the path to one)."""
    return bool(SECRET_NAME.search(name)) and not name.endswith("_FILE")


# -- compose, as compose would run it ------------------------------------------------------


@dataclass
class FilledIn:
    """.env.example filled in: every secret a canary (URL-safe), the rest as shipped."""

    variables: dict[str, str]
    canaries: dict[str, str]


def filled_in_env() -> FilledIn:
    variables = {k: v or "" for k, v in dotenv_values(ENV_EXAMPLE).items()}
    canaries = {
        k: f"canary-{k.lower().replace('_', '-')}-{uuid.uuid4().hex[:8]}" for k in variables if is_secret(k)
    }
    return FilledIn({**variables, **canaries}, canaries)


def interpolate_with(value: str, variables: Mapping[str, str]) -> str:
    """Compose's interpolation of `value` with `variables` (${V}, ${V:-d}, ${V:?e}, $$)."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"] or ""
        current = variables.get(name)
        empty = current is None or (op.startswith(":") and current == "")
        if op.endswith("-"):
            return arg if empty else str(current)
        assert not (op.endswith("?") and empty), f"compose refuses to start: {name}: {arg}"
        return current or ""

    return "$".join(_VARIABLE.sub(one, part) for part in value.split("$$"))


def container_env(svc: dict[str, Any], variables: Mapping[str, str]) -> dict[str, str]:
    env = svc.get("environment") or {}
    return {k: interpolate_with(str(v), variables) for k, v in env.items()}


def container_argv(svc: dict[str, Any], variables: Mapping[str, str]) -> list[str]:
    """The container's command line: its entrypoint, then its command (compose's or the image's)."""
    ours = svc.get("build", {}).get("dockerfile") == "ops/Dockerfile"
    if "entrypoint" in svc:
        entrypoint, default_command = list(svc["entrypoint"]), []  # an entrypoint resets CMD
    elif ours:
        entrypoint, default_command = dockerfile_json("ENTRYPOINT"), dockerfile_json("CMD")
    else:
        entrypoint, default_command = IMAGE_ENTRYPOINTS[svc["image"]], IMAGE_COMMANDS[svc["image"]]
    command = svc.get("command", default_command)
    command = command.split() if isinstance(command, str) else command
    return [interpolate_with(str(a), variables) for a in [*entrypoint, *command]]


def healthcheck_argv(svc: dict[str, Any], variables: Mapping[str, str]) -> list[str] | None:
    test = (svc.get("healthcheck") or {}).get("test")
    if test is None:
        return None
    test = ["CMD-SHELL", test] if isinstance(test, str) else test
    kind, *rest = (interpolate_with(str(a), variables) for a in test)
    return ["/bin/sh", "-c", *rest] if kind == "CMD-SHELL" else rest


def secret_files(
    compose: dict[str, Any], svc: dict[str, Any], variables: Mapping[str, str]
) -> dict[str, str]:
    """/run/secrets/… path → content, for the service's secrets (compose makes these files)."""
    files = {}
    for entry in svc.get("secrets", []):
        source = entry if isinstance(entry, str) else entry["source"]
        target = source if isinstance(entry, str) else entry.get("target", source)
        spec = compose["secrets"][source]
        content = (
            variables[spec["environment"]] if "environment" in spec else (ROOT / spec["file"]).read_text()
        )
        files[f"/run/secrets/{target}"] = content
    return files


def shell_scripts(argv: list[str]) -> list[str]:
    """The scripts a command line hands a shell (`sh -c SCRIPT …`)."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-c" and Path(argv[0]).name == "sh"]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml", reason="pyyaml is needed to parse docker-compose.yml")
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


# -- no secret on a command line -----------------------------------------------------------


def test_no_secret_is_on_a_command_line_of_compose(compose: dict[str, Any]) -> None:
    """With .env filled in, no container's command line or healthcheck holds a secret, and no
    shell script in them expands a variable holding one (it would be a program's argument)."""
    filled = filled_in_env()
    assert set(filled.canaries) >= {"REDIS_PASSWORD", "POSTGRES_PASSWORD", "PIPELINE_LLM_API_KEY"}
    checked = 0
    for name, svc in compose["services"].items():
        env = container_env(svc, filled.variables)
        holding = {k for k, v in env.items() if is_secret(k) or any(c in v for c in filled.canaries.values())}
        for argv in (container_argv(svc, filled.variables), healthcheck_argv(svc, filled.variables)):
            if argv is None:
                continue
            checked += 1
            for secret, canary in filled.canaries.items():
                assert not any(canary in arg for arg in argv), f"{name}: {secret} on the command line {argv}"
            for script in shell_scripts(argv):
                expanded = set(_SHELL_REFERENCE.findall(script)) & (holding | set(filled.canaries))
                assert not expanded, f"{name}: a shell line expands {sorted(expanded)}: read it from a file"
    assert checked >= 8


def test_no_secret_is_on_a_command_line_of_systemd_or_cron() -> None:
    env_files = [dotenv_values(ENV_EXAMPLE), dotenv_values(FLOWER_ENV)]
    holding = {k for values in env_files for k, v in values.items() if is_secret(k) or url_password(v or "")}
    assert {"PIPELINE_REDIS_URL", "PIPELINE_FLOWER_PASSWORD"} <= holding
    unit_lines = [
        f"{unit.name}: {value}"
        for unit in sorted((ROOT / "ops" / "systemd").glob("*.service"))
        for key, value in read_unit(unit).items()
        if key.startswith("Exec")
    ]
    cron_lines = [ln for ln in CRONTAB.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(unit_lines) >= 3 and len(cron_lines) >= 3
    for line in unit_lines + cron_lines:
        assert not set(_SHELL_REFERENCE.findall(line)) & holding, line
        assert not any(url_password(word) for word in line.split()), line


@dataclass
class Logged:
    """Programs on PATH that append their command line to `log`, then run the real one."""

    bin: Path
    log: Path

    def command_lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def logged(tmp_path: Path) -> Logged:
    """A PATH of logging stand-ins only: a program a script starts that is not here fails, so
    none escapes the log. redis-cli talks to the test's server, as it would in its container."""
    server = embedded.redis_server_binary()
    cli = Path(server).with_name("redis-cli")
    found = {
        "redis-server": server,
        "redis-cli": str(cli) if cli.exists() else shutil.which("redis-cli"),
        "sh": shutil.which("sh"),
        "cat": shutil.which("cat"),
        "grep": shutil.which("grep"),
    }
    if not all(found.values()):
        pytest.skip(f"missing here: {[k for k, v in found.items() if not v]}")
    bin_dir, log = tmp_path / "bin", tmp_path / "argv.log"
    bin_dir.mkdir()
    runs = {name: f'exec {path} "$@"' for name, path in found.items()}
    runs["redis-cli"] = f'exec {found["redis-cli"]} -p "$TEST_REDIS_PORT" "$@"'
    # The image's entrypoint as it runs once it is the redis user (its root branch chowns /data
    # and re-executes itself under gosu with the same arguments and standard input).
    runs["docker-entrypoint.sh"] = 'exec "$@"'
    for name, run in runs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\nprintf '%s\\n' \"$0 $*\" >> {log}\n{run}\n")
        (bin_dir / name).chmod(0o755)
    return Logged(bin_dir, log)


def test_composes_redis_takes_its_password_from_the_secret_file_only(
    compose: dict[str, Any], logged: Logged, tmp_path: Path
) -> None:
    """Compose's Redis, started as its container would be: the password in the secret file is
    required by the server, the healthcheck passes with it and fails with another, and no
    command line that either started held it."""
    filled = filled_in_env()
    password = filled.canaries["REDIS_PASSWORD"]
    svc = compose["services"]["redis"]
    secrets_dir = tmp_path / "run-secrets"
    secrets_dir.mkdir()
    env = container_env(svc, filled.variables)
    for path, content in secret_files(compose, svc, filled.variables).items():
        (secrets_dir / Path(path).name).write_text(content)
    env = {k: v.replace("/run/secrets/", f"{secrets_dir}/") for k, v in env.items()}
    port = embedded.free_port()
    env.update(PATH=str(logged.bin), TEST_REDIS_PORT=str(port))
    (tmp_path / "data").mkdir()
    # The container's own port and data directory, moved to the test's.
    extra = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path / "data"), "--save", ""]
    argv = container_argv(svc, filled.variables) + extra
    assert password not in " ".join(argv)
    with embedded.Child("redis", argv, env=env, log_path=tmp_path / "redis.log") as server:
        try:
            embedded.wait_for_port(port, child=server)
        except RuntimeError as exc:
            pytest.fail(f"{exc}: {(tmp_path / 'redis.log').read_text()[-2000:]}")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=port, retry=Retry(NoBackoff(), 0)).ping()  # no retries
        assert redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=5).ping()
        cmdline = Path(f"/proc/{server.process.pid}/cmdline").read_bytes()
        assert password.encode() not in cmdline

        check = healthcheck_argv(svc, filled.variables)
        assert check is not None
        assert subprocess.run(check, env=env, capture_output=True, timeout=30).returncode == 0
        for path in secrets_dir.iterdir():
            path.write_text("not-the-password")
        assert subprocess.run(check, env=env, capture_output=True, timeout=30).returncode != 0

    lines = logged.command_lines()
    started = {Path(line.split()[0]).name for line in lines}
    assert {"redis-server", "redis-cli"} <= started, lines
    assert not [line for line in lines if password in line]


# -- placeholders --------------------------------------------------------------------------


def _said_one_sentence(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for part in parts:
        assert part in errors[0], errors[0]


@pytest.mark.parametrize(
    ("command", "setting", "url", "fix"),
    [
        ("worker", "PIPELINE_REDIS_URL", "redis://:change-me@127.0.0.1:6379/15", "REDIS_PASSWORD in .env"),
        (
            "submit",
            "PIPELINE_DATABASE_URL",
            "postgresql://pipeline:change-me@127.0.0.1:5432/test",
            "POSTGRES_PASSWORD in .env",
        ),
        (
            "flower",
            "PIPELINE_LIMITER_REDIS_URL",
            "redis://127.0.0.1:6379/15?password=Secret",
            "limiter's Redis",
        ),
    ],
)
def test_a_placeholder_password_in_a_url_is_refused_at_start(
    pipeline_env: dict[str, str], tmp_path: Path, command: str, setting: str, url: str, fix: str
) -> None:
    args = [command, str(tmp_path)] if command == "submit" else [command]
    env = {setting: url, "PIPELINE_FLOWER_USER": "ops", "PIPELINE_FLOWER_PASSWORD": "a-real-one"}
    result = run_cli(*args, env=env, cwd=tmp_path, timeout_s=60)
    _said_one_sentence(result, f"{setting} has the placeholder password", "replace it with", fix)


@pytest.mark.parametrize("placeholder", sorted(PLACEHOLDER_PASSWORDS))
def test_one_list_of_placeholders_for_every_password(placeholder: str) -> None:
    for field in ("redis_url", "limiter_redis_url", "database_url"):
        scheme = "postgresql+psycopg" if field == "database_url" else "redis"
        with pytest.raises(ValueError, match="has the placeholder password"):
            Settings(_env_file=None, **{field: f"{scheme}://user:{placeholder.upper()}@host/0"})  # type: ignore[arg-type]
    flower = Settings(_env_file=None, flower_user="ops", flower_password=placeholder)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="placeholder"):
        basic_auth(flower, unauthenticated=False)
    real = Settings(_env_file=None, redis_url="redis://:x7-real@host/0", database_url="sqlite:///x.db")  # type: ignore[arg-type]
    assert real.redis_url == "redis://:x7-real@host/0"


def test_prestart_refuses_a_placeholder_at_once_instead_of_waiting(tmp_path: Path) -> None:
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PIPELINE_DATABASE_URL": "postgresql+psycopg://pipeline:change-me@127.0.0.1:1/pipeline",
        "PIPELINE_DB_WAIT_TRIES": "30",
        "PIPELINE_DB_WAIT_DELAY_S": "2",  # a minute of waiting, had it waited
    }
    done = subprocess.run([str(PRESTART)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=50)
    _said_one_sentence(done, "PIPELINE_DATABASE_URL has the placeholder password change-me")
    assert "waiting for the database" not in done.stderr


# -- one name per setting ------------------------------------------------------------------


def setting_names() -> set[str]:
    return {f"PIPELINE_{name.upper()}" for name in Settings.model_fields}


def test_each_setting_goes_by_one_name(compose: dict[str, Any]) -> None:
    # FLOWER_USER in .env once became PIPELINE_FLOWER_USER in Flower's container.
    settings = setting_names()
    second_names = []
    for path in ONE_NAME_FILES:
        if path.is_file():
            for m in re.finditer(r"(?<![A-Za-z0-9_])([A-Z][A-Z0-9_]+)(?![A-Za-z0-9_])", path.read_text()):
                if not m[1].startswith("PIPELINE_") and f"PIPELINE_{m[1]}" in settings:
                    second_names.append(f"{path.relative_to(ROOT)}: {m[1]}")
    assert not second_names, f"say PIPELINE_X, not X: {second_names}"
    environments = [compose["x-pipeline-env"]] + [
        s.get("environment") or {} for s in compose["services"].values()
    ]
    for environment in environments:
        for key, raw in environment.items():
            only = _VARIABLE.fullmatch(str(raw))
            if key in settings and only:
                assert only["name"] == key, (
                    f"{key} is set from ${{{only['name']}}}: name it {key} in .env too"
                )


# -- env files: sourced by sh as every other reader reads them -----------------------------


def uncommented(text: str) -> str:
    """The file with its commented-out settings (`# PIPELINE_X=value`) switched on."""
    return re.sub(r"^# ([A-Z][A-Z0-9_]*=)", r"\1", text, flags=re.M)


def cron_job_prefix() -> str:
    """What the crontab's submit job runs before `pipeline submit`: sourcing the env file."""
    (job,) = [
        ln for ln in CRONTAB.read_text().splitlines() if "pipeline submit" in ln and not ln.startswith("#")
    ]
    command = job.split(maxsplit=6)[6]
    return command[: command.index("pipeline submit")]


@pytest.mark.parametrize("path", [ENV_EXAMPLE, FLOWER_ENV], ids=lambda p: p.name)
@pytest.mark.parametrize("switched_on", [False, True], ids=["as-shipped", "comments-on"])
def test_the_crontabs_sh_reads_the_env_file_as_compose_systemd_and_pipeline_do(
    tmp_path: Path, path: Path, switched_on: bool
) -> None:
    """A filled-in copy of the env file, sourced by the crontab's own line in its own shell,
    defines every variable with the value python-dotenv (pipeline's .env reader, and compose's
    and systemd's quoting rules) reads; nothing runs or expands on the way."""
    env_file = tmp_path / "env"
    text = path.read_text()
    env_file.write_text(uncommented(text) if switched_on else text)
    (tmp_path / "filing-a.txt").write_text("x")  # what an unquoted * would expand to
    shell = re.search(r"^SHELL=(\S+)$", CRONTAB.read_text(), re.M)
    assert shell and Path(shell[1]).exists()
    prefix = cron_job_prefix()
    assert "/etc/pipeline/env" in prefix
    dump = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    script = prefix.replace("/etc/pipeline/env", str(env_file)) + dump
    done = subprocess.run(
        [shell[1], "-c", script],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    sourced = json.loads(done.stdout)
    expected = {k: v or "" for k, v in dotenv_values(env_file).items()}
    assert len(expected) >= (3 if path == FLOWER_ENV else 15)
    assert {k: sourced.get(k) for k in expected} == expected
    if path == ENV_EXAMPLE:
        assert sourced["PIPELINE_INBOX_SCHEDULE"] == Settings.model_fields["inbox_schedule"].default


# -- Flower's own environment --------------------------------------------------------------


def test_flower_gets_the_broker_and_its_login_only(compose: dict[str, Any]) -> None:
    """Under compose and under systemd alike: no database URL, no LLM key (the real `pipeline
    flower` started with its env file alone is in test_flower.py)."""
    assert set(compose["services"]["flower"]["environment"]) <= FLOWER_NEEDS
    assert "flower" in pipeline_services(compose["services"])
    unit = FLOWER_UNIT.read_text()
    env_files = re.findall(r"^EnvironmentFile=-?(.+)$", unit, re.M)
    assert env_files == ["/etc/pipeline/flower.env"], "Flower's unit reads the workers' env file"
    assert not re.search(r"^Environment=", unit, re.M)
    assert FLOWER_ENV.name == Path(env_files[0]).name + ".example"
    names = set(dotenv_values(FLOWER_ENV)) | set(
        re.findall(r"^# (PIPELINE_[A-Z0-9_]+)=", FLOWER_ENV.read_text(), re.M)
    )
    assert {"PIPELINE_REDIS_URL", "PIPELINE_FLOWER_USER", "PIPELINE_FLOWER_PASSWORD"} <= names <= FLOWER_NEEDS
