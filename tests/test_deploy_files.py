"""The deployment files (compose, Dockerfile, prestart, cron, systemd, Prometheus) checked without
Docker.

No Docker engine is needed: the files are parsed, every command they give the `pipeline` image
is parsed by the real click CLI, and prestart.sh is run against a SQLite file.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import urllib.error
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest

from pipeline.cli import main
from pipeline.core.settings import Settings, default
from pipeline.runs.monitoring import METRICS_PATH

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "ops" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PRESTART = ROOT / "ops" / "prestart.sh"
ENV_EXAMPLE = ROOT / ".env.example"
CRONTAB = ROOT / "ops" / "crontab.example"
WORKER_UNIT = ROOT / "ops" / "systemd" / "pipeline-worker@.service"
BEAT_UNIT = ROOT / "ops" / "systemd" / "pipeline-beat.service"
FLOWER_UNIT = ROOT / "ops" / "systemd" / "pipeline-flower.service"
FLOWER_ENV = ROOT / "ops" / "systemd" / "flower.env.example"
PROMETHEUS = ROOT / "ops" / "prometheus.yml"

SECRET_NAME = re.compile(r"(?:^|_)(?:PASSWORD|SECRET|TOKEN|API_KEY)(?:$|_)", re.IGNORECASE)
ONLY_INTERPOLATION = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::?[-?][^}]*)?\}$")
_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


# -- helpers --------------------------------------------------------------------------------


def interpolate(value: str) -> str:
    """Compose's interpolation with nothing set: defaults used, required variables as <NAME>."""

    def one(match: re.Match[str]) -> str:
        op = match["op"] or ""
        return match["arg"] if op.endswith("-") else f"<{match['name']}>"

    return "$".join(_VARIABLE.sub(one, part) for part in value.split("$$"))


def url_password(value: str) -> str | None:
    """The password of a URL, with each ${...} in it shown as ${}."""
    masked = _VARIABLE.sub("XVARX", value)
    password = urlsplit(masked).password if "://" in masked else None
    return None if password is None else password.replace("XVARX", "${}")


def compose_variables(text: str) -> set[str]:
    return {m["name"] for m in _VARIABLE.finditer(text.replace("$$", ""))}


def as_args(command: str | list[str]) -> list[str]:
    args = shlex.split(command) if isinstance(command, str) else list(command)
    return [interpolate(str(a)) for a in args]


def parse_cli(args: list[str]) -> tuple[click.Command, click.Context]:
    """Resolve `pipeline ARGS` to its subcommand and parse its options strictly (raises on error)."""
    command: click.Command = main
    ctx = click.Context(main, info_name="pipeline")
    rest = list(args)
    while isinstance(command, click.Group):
        assert rest, f"`pipeline {shlex.join(args)}` names no subcommand"
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        if isinstance(sub, click.Group):
            ctx = click.Context(sub, info_name=name, parent=ctx)
        else:
            ctx = sub.make_context(name, rest, parent=ctx, resilient_parsing=False)
        command = sub
    return command, ctx


def read_unit(path: Path) -> configparser.SectionProxy:
    """The [Service] section of a systemd unit."""
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(path.read_text())
    return unit["Service"]


def duration_s(value: str) -> float:
    """A compose duration such as 120s, 2m or 1m30s."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", value)
    assert parts and "".join(n + u for n, u in parts) == value, f"not a duration: {value!r}"
    return sum(float(n) * units[u] for n, u in parts)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            out.append((instruction.upper(), args.strip()))
    return out


def dockerfile_json(instruction: str) -> list[str]:
    values = [args for ins, args in dockerfile_instructions() if ins == instruction]
    assert values, f"the Dockerfile has no {instruction}"
    parsed = json.loads(values[-1])  # exec (JSON) form: no shell in between, signals reach pipeline
    assert isinstance(parsed, list)
    return parsed


def env_example(path: Path = ENV_EXAMPLE) -> dict[str, str]:
    """KEY=value lines of .env.example (or another env file), including commented-out ones
    (# KEY=value), a double-quoted value without its quotes."""
    found = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            quoted = re.fullmatch(r'"(.*)"', m[2])
            found[m[1]] = quoted[1] if quoted else m[2]
    return found


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip(
        "yaml", reason="pyyaml is needed to parse docker-compose.yml: add it to the dev extras"
    )
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def pipeline_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services run from the image built by ops/Dockerfile."""
    return {
        name: svc
        for name, svc in services.items()
        if isinstance(svc.get("build"), dict) and svc["build"].get("dockerfile") == "ops/Dockerfile"
    }


def depends(svc: dict[str, Any], on: str) -> str | None:
    deps = svc.get("depends_on", {})
    return deps.get(on, {}).get("condition") if isinstance(deps, dict) else None


# -- docker-compose.yml ---------------------------------------------------------------------


def test_compose_has_the_services_and_no_version_key(compose: dict[str, Any]) -> None:
    assert "version" not in compose  # obsolete in the compose spec
    assert {"redis", "postgres", "migrate", "worker", "beat", "flower", "sim"} <= set(compose["services"])
    assert set(pipeline_services(compose["services"])) == {"migrate", "worker", "beat", "flower", "sim"}


def test_redis_is_a_durable_password_protected_broker(compose: dict[str, Any]) -> None:
    # Run for real, password and healthcheck included, in test_deploy_secrets.py.
    redis = compose["services"]["redis"]
    args = as_args(redis["command"])
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    # The password: a secret file made from REDIS_PASSWORD, read by the server and the check.
    assert redis["secrets"] == ["redis_password"]
    assert compose["secrets"]["redis_password"] == {"environment": "REDIS_PASSWORD"}
    assert redis["environment"] == {"REDIS_PASSWORD_FILE": "/run/secrets/redis_password"}
    assert '"$$REDIS_PASSWORD_FILE"' in " ".join(redis["entrypoint"])
    check = " ".join(redis["healthcheck"]["test"])
    assert 'REDISCLI_AUTH="$$(cat "$$REDIS_PASSWORD_FILE")" redis-cli ping' in check
    assert any(v.endswith(":/data") for v in redis["volumes"])


def test_postgres_takes_its_credentials_from_env_and_has_a_healthcheck(
    services: dict[str, dict[str, Any]],
) -> None:
    pg = services["postgres"]
    for key in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"):
        assert ONLY_INTERPOLATION.match(pg["environment"][key]), key
    check = " ".join(pg["healthcheck"]["test"])
    assert 'pg_isready -U "$$POSTGRES_USER" -d "$$POSTGRES_DB"' in check
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])


def test_migrate_runs_prestart_once_after_postgres_is_healthy(services: dict[str, dict[str, Any]]) -> None:
    migrate = services["migrate"]
    assert migrate["restart"] == "no"  # quoted in YAML: a bare no is a boolean
    assert depends(migrate, "postgres") == "service_healthy"
    (entrypoint,) = migrate["entrypoint"]
    copies = [args for ins, args in dockerfile_instructions() if ins == "COPY"]
    assert any(args.split()[-1] == entrypoint and "ops/prestart.sh" in args for args in copies), (
        f"the image has no {entrypoint}"
    )


def test_worker_is_scalable_and_shuts_down_gracefully(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker  # else --scale worker=N clashes
    assert depends(worker, "redis") == "service_healthy"
    assert depends(worker, "migrate") == "service_completed_successfully"
    assert duration_s(worker["stop_grace_period"]) >= default("llm_timeout_s")
    assert worker["restart"] == "unless-stopped"
    command, ctx = parse_cli(as_args(worker["command"]))
    assert command.name == "worker" and ctx.params["concurrency"] >= 1


def test_beat_gets_the_pipeline_settings_and_waits_for_the_migration(
    services: dict[str, dict[str, Any]],
) -> None:
    beat = services["beat"]
    command, _ = parse_cli(as_args(beat["command"]))
    assert command.name == "beat"
    assert "ports" not in beat
    assert depends(beat, "redis") == "service_healthy"
    assert depends(beat, "migrate") == "service_completed_successfully"
    assert beat["restart"] == "unless-stopped"


def mounts(svc: dict[str, Any]) -> dict[str, str]:
    """A service's volumes as {target: source} (short syntax: source:target[:mode])."""
    return {v.split(":")[1]: v.split(":")[0] for v in svc.get("volumes", [])}


def image_owned_dirs() -> set[str]:
    """Directories the Dockerfile creates owned by its pipeline user (`install -d -o pipeline`)."""
    owned: set[str] = set()
    for _, args in dockerfile_instructions():
        for m in re.finditer(r"install -d -o pipeline -g pipeline ((?:/\S+ ?)+)", args):
            owned.update(m[1].split())
    return owned


def image_data_dir() -> str:
    env = " ".join(args for ins, args in dockerfile_instructions() if ins == "ENV")
    found = re.search(r"PIPELINE_DATA_DIR=(\S+)", env)
    assert found, "the image sets no PIPELINE_DATA_DIR"
    return found[1]


def documented(command: str) -> list[str]:
    """The arguments after `command` in compose's header comment (up to its own comment)."""
    found = re.search(rf"^#\s+{re.escape(command)} (.*?)(?:\s+#.*)?$", COMPOSE.read_text(), re.M)
    assert found, f"docker-compose.yml documents no `{command} …`"
    return shlex.split(found[1])


def test_a_report_written_by_a_run_container_stays_in_the_reports_volume(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    source = mounts(worker).get("/reports")
    assert source in compose["volumes"], (
        "/reports is no named volume: a `run --rm` container's report is lost"
    )
    assert "/reports" in image_owned_dirs()  # a new volume takes its mount point's owner: writable
    args = documented("docker compose run --rm worker")
    command, ctx = parse_cli(args)
    assert command.name == "report" and str(ctx.params["output"]).startswith("/reports/")
    # ... and copied out of a running worker, which mounts the same volume.
    assert documented("docker compose cp") == [f"worker:{ctx.params['output']}", "."]


def test_beats_schedule_state_is_on_a_volume(compose: dict[str, Any]) -> None:
    beat = compose["services"]["beat"]
    data_dir = image_data_dir()
    assert mounts(beat).get(data_dir) in compose["volumes"], f"beat's {data_dir} is not on a volume"
    assert data_dir in image_owned_dirs()
    assert "PIPELINE_DATA_DIR" not in beat["environment"]  # the schedule stays where the volume is
    # `pipeline beat` keeps its schedule in the data directory.
    operate = (ROOT / "pipeline" / "cli" / "operate.py").read_text()
    assert 'settings.data_dir / "celerybeat-schedule"' in operate


def test_the_documented_psql_line_reaches_composes_postgres(compose: dict[str, Any]) -> None:
    pg = compose["services"]["postgres"]
    expected = [
        "-U",
        interpolate(pg["environment"]["POSTGRES_USER"]),
        "-d",
        interpolate(pg["environment"]["POSTGRES_DB"]),
    ]
    assert documented("docker compose exec postgres psql") == expected
    readme = (ROOT / "README.md").read_text()
    line = re.search(r"^docker compose exec postgres psql (.*)$", readme, re.M)
    assert line, "the README shows no `docker compose exec postgres psql` line"
    assert shlex.split(line[1])[:4] == expected


def test_no_deployment_file_speaks_of_work_in_progress() -> None:
    # ops/pipeline-beat.service once said `pipeline beat` "is being written in parallel (issue 6)".
    for path in [COMPOSE, ENV_EXAMPLE, *sorted((ROOT / "ops").rglob("*")), CRONTAB]:
        if path.is_file():
            text = path.read_text()
            for stale in (r"being written", r"in parallel", r"\(issue \d+\)", r"once it has landed"):
                assert not re.search(stale, text, re.I), f"{path.relative_to(ROOT)}: {stale}"


def test_flower_needs_a_login_and_is_published_on_loopback_only(compose: dict[str, Any]) -> None:
    flower = compose["services"]["flower"]
    # Listens on every interface inside its container, so that the published port reaches it ...
    command, ctx = parse_cli(as_args(flower["command"]))
    assert command.name == "flower" and not ctx.params["unauthenticated"]
    assert ctx.params["address"] == "0.0.0.0"
    # ... which only the Docker host's loopback publishes.
    port = Settings.model_fields["flower_port"].default
    assert flower["ports"] == [f"127.0.0.1:{port}:{port}"]
    env = flower["environment"]
    for key in ("PIPELINE_FLOWER_USER", "PIPELINE_FLOWER_PASSWORD"):  # compose refuses to start without
        assert interpolate(env[key]) == f"<{key}>", f"{key} is not required"
    # The broker only: no database URL and no LLM key in the monitor's container.
    assert set(env) == {"PIPELINE_REDIS_URL", "PIPELINE_FLOWER_USER", "PIPELINE_FLOWER_PASSWORD"}
    assert env["PIPELINE_REDIS_URL"] == compose["x-pipeline-env"]["PIPELINE_REDIS_URL"]
    assert depends(flower, "redis") == "service_healthy"
    assert flower["restart"] == "unless-stopped"


def test_flowers_healthcheck_logs_in_with_the_containers_credentials(
    services: dict[str, dict[str, Any]],
) -> None:
    # The check itself runs against a real Flower in test_flower.py.
    check = services["flower"]["healthcheck"]
    kind, python, flag, code = check["test"]
    assert (kind, python, flag) == ("CMD", "python", "-c")  # exec form: no shell, no $ expansion
    compile(code, "healthcheck", "exec")
    assert "$" not in code and "FLOWER_PASSWORD}" not in code
    assert 'os.environ["PIPELINE_FLOWER_PASSWORD"]' in code and "Authorization" in code
    assert duration_s(check["timeout"]) < duration_s(check["interval"])


def compose_text_of(variable: str) -> str:
    """The compose file's lines that name `variable`."""
    return "\n".join(line for line in COMPOSE.read_text().splitlines() if variable in line)


def test_sim_is_only_in_the_dry_run_profile(services: dict[str, dict[str, Any]]) -> None:
    assert services["sim"]["profiles"] == ["dry-run"]
    command, ctx = parse_cli(as_args(services["sim"]["command"]))
    assert command.name == "sim" and ctx.params["host"] == "0.0.0.0"
    # The dry run's base URL, as .env.example and the compose file's error message give it.
    dry_run = re.search(r"(http://sim:(\d+)/v1)", compose_text_of("PIPELINE_LLM_BASE_URL"))
    assert dry_run and int(dry_run[2]) == ctx.params["port"], dry_run
    assert [name for name, svc in services.items() if "profiles" in svc] == ["sim"]


def test_pipeline_services_share_the_connection_settings(compose: dict[str, Any]) -> None:
    env = compose["x-pipeline-env"]
    assert set(env) >= {
        "PIPELINE_DATABASE_URL",
        "PIPELINE_REDIS_URL",
        "PIPELINE_LLM_BASE_URL",
        "PIPELINE_LLM_API_KEY",
        "PIPELINE_LLM_MODEL",
    }
    pg = compose["services"]["postgres"]["environment"]
    db = urlsplit(interpolate(env["PIPELINE_DATABASE_URL"]))
    assert (db.hostname, db.port) == ("postgres", 5432), "the compose service, on Postgres's port"
    assert db.username == interpolate(pg["POSTGRES_USER"]) and db.path == "/" + interpolate(pg["POSTGRES_DB"])
    assert db.password == "<POSTGRES_PASSWORD>" and "POSTGRES_PASSWORD" in pg["POSTGRES_PASSWORD"]
    broker = urlsplit(interpolate(env["PIPELINE_REDIS_URL"]))
    assert (broker.scheme, broker.hostname, broker.port) == ("redis", "redis", 6379)
    assert broker.password == "<REDIS_PASSWORD>", "the password the redis service reads from its secret"
    assert compose["secrets"]["redis_password"] == {"environment": "REDIS_PASSWORD"}
    assert interpolate(env["PIPELINE_LLM_MODEL"]) == default("llm_model")
    for name in ("migrate", "worker", "beat"):
        assert compose["services"][name]["environment"] == env, name


def test_compose_has_no_literal_secrets(compose: dict[str, Any]) -> None:
    text = COMPOSE.read_text()
    assert not re.search(r"sk-[A-Za-z0-9_-]{12,}", text)
    env = compose["x-pipeline-env"]
    environments = [env] + [svc.get("environment", {}) for svc in compose["services"].values()]
    for environment in environments:
        for key, value in environment.items():
            if SECRET_NAME.search(key) and not key.endswith("_FILE"):  # a _FILE is the secret's path
                assert ONLY_INTERPOLATION.match(str(value)), f"{key} is not only ${{...}}"
            assert url_password(str(value)) in (None, "${}"), f"literal password in {key}"


def test_every_compose_variable_is_in_env_example() -> None:
    missing = compose_variables(COMPOSE.read_text()) - set(env_example())
    assert not missing, f"add to .env.example: {sorted(missing)}"


def test_every_pipeline_command_is_a_real_cli_command(services: dict[str, dict[str, Any]]) -> None:
    checked = 0
    for name, svc in pipeline_services(services).items():
        if "entrypoint" in svc:
            assert svc["entrypoint"] == ["/app/ops/prestart.sh"], name  # runs `pipeline db upgrade`
            assert "command" not in svc, name
            continue
        args = as_args(svc.get("command", dockerfile_json("CMD")))
        try:
            parse_cli(args)
        except click.ClickException as exc:
            pytest.fail(f"{name}: `pipeline {shlex.join(args)}`: {exc.format_message()}")
        checked += 1
    assert checked >= 3


def test_cli_parsing_rejects_bad_commands() -> None:
    # The check above is only worth something if it can fail.
    with pytest.raises(click.UsageError):
        parse_cli(["wokrer"])
    with pytest.raises(click.BadParameter):
        parse_cli(["worker", "--concurrency", "many"])
    with pytest.raises(click.NoSuchOption):
        parse_cli(["sim", "--listen", "0.0.0.0"])
    command, ctx = parse_cli(["worker", "--concurrency", "16"])
    assert command.name == "worker" and ctx.params["concurrency"] == 16
    # Only a pending command is skipped while it is missing, never a typo of one.
    with pytest.raises(click.UsageError):
        parse_cli(["beet"])


# -- image ----------------------------------------------------------------------------------


def test_dockerfile_builds_a_non_root_pipeline_image() -> None:
    instructions = dockerfile_instructions()
    kind, image = instructions[0]
    found = re.fullmatch(r"python:(\d+)\.(\d+)-slim", image)
    assert kind == "FROM" and found, instructions[0]
    needs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert needs.startswith(">=") and (int(found[1]), int(found[2])) >= tuple(
        map(int, needs[2:].split("."))
    ), f"the image's Python {found[1]}.{found[2]} is not {needs}"
    users = [i for i, (ins, _) in enumerate(instructions) if ins == "USER"]
    installs = [i for i, (ins, args) in enumerate(instructions) if ins == "RUN" and "pip install" in args]
    assert users and installs and users[-1] > installs[-1]
    assert instructions[users[-1]][1] not in ("root", "0")
    env = " ".join(args for ins, args in instructions if ins == "ENV")
    assert "PYTHONUNBUFFERED=1" in env
    for ins, args in instructions:
        if ins in ("ENV", "ARG"):
            assert not SECRET_NAME.search(args), f"secret in the image: {ins} {args}"
    sources = " ".join(args for ins, args in instructions if ins == "COPY")
    for path in ("pyproject.toml", "README.md", "pipeline/", "workers/", "migrations/", "ops/prestart.sh"):
        assert path in sources, path


def test_entrypoint_is_the_console_script_and_cmd_parses() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["pipeline"] == "pipeline.cli:main"
    assert dockerfile_json("ENTRYPOINT") == ["pipeline"]
    command, _ = parse_cli(dockerfile_json("CMD"))
    assert command.name == "worker"


def test_dockerignore_keeps_junk_and_secrets_out_but_not_the_sources() -> None:
    patterns = [
        ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    for needed in (".git", ".env", ".venv", "venv", ".pipeline", "**/__pycache__", "tests"):
        assert needed in patterns, needed
    for copied in ("pyproject.toml", "README.md", "pipeline", "workers", "migrations", "ops/prestart.sh"):
        assert not any(fnmatch.fnmatch(copied, p) for p in patterns), copied


# -- prestart.sh ----------------------------------------------------------------------------


def test_prestart_is_strict_posix_sh_that_migrates() -> None:
    text = PRESTART.read_text()
    assert os.access(PRESTART, os.X_OK)
    assert text.startswith("#!/bin/sh\n")
    assert re.search(r"^set -eu$", text, re.MULTILINE)
    assert re.search(r"^pipeline db upgrade$", text, re.MULTILINE)
    parse_cli(["db", "upgrade"])
    assert "python -c" in text and "sqlalchemy" in text and "psql" not in text
    sh = shutil.which("sh")
    assert sh is not None
    subprocess.run([sh, "-n", str(PRESTART)], check=True)


def _run_prestart(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # python, pipeline
        "PIPELINE_DATABASE_URL": url,
        "PIPELINE_DB_WAIT_TRIES": "2",
        "PIPELINE_DB_WAIT_DELAY_S": "0",
    }
    return subprocess.run(
        [str(PRESTART), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_prestart_migrates_a_reachable_database_then_execs_its_arguments(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pipeline.db'}"
    done = _run_prestart(tmp_path, url, "sh", "-c", "echo handed-over")
    assert done.returncode == 0, done.stderr
    assert "database at revision head" in done.stdout
    assert done.stdout.rstrip().endswith("handed-over")


def test_prestart_gives_up_after_its_tries(tmp_path: Path) -> None:
    done = _run_prestart(tmp_path, "postgresql+psycopg://u:p@127.0.0.1:1/none")
    assert done.returncode != 0
    assert "not reachable after 2 tries" in done.stderr


# -- .env.example, cron, systemd ------------------------------------------------------------


def test_env_example_has_placeholders_only() -> None:
    for path in (ENV_EXAMPLE, FLOWER_ENV):
        for key, value in env_example(path).items():
            if SECRET_NAME.search(key):
                assert value in ("", "change-me"), f"{key} in {path.name} must be a placeholder"
            assert url_password(value) in (None, "change-me"), key
    values = env_example()
    assert values["REDIS_PASSWORD"] == "change-me" and values["POSTGRES_PASSWORD"] == "change-me"


def test_crontab_submits_nightly_with_the_env_file() -> None:
    jobs = [
        ln
        for ln in CRONTAB.read_text().splitlines()
        if ln.strip() and not ln.startswith("#") and not re.match(r"^[A-Z]+=", ln)
    ]
    assert len(jobs) == 2
    watchdog = jobs[1].split(maxsplit=6)
    assert watchdog[:5] == ["*/5", "*", "*", "*", "*"] and watchdog[6].endswith(
        "pipeline watchdog >> /var/log/pipeline/watchdog.log 2>&1"
    )
    parse_cli(["watchdog"])
    fields = jobs[0].split(maxsplit=6)
    minute, hour, dom, month, dow, _user, command = fields
    assert minute.isdigit() and hour.isdigit() and (dom, month, dow) == ("*", "*", "*")
    assert re.search(r"(^|&& )\. /etc/pipeline/env( |$)", command)
    assert not re.search(r"(?<!\\)%", command)  # cron turns a bare % into a newline
    submit = command[command.index("pipeline submit") :].replace("$(date +\\%F)", "2025-01-31")
    args = shlex.split(submit)[1:]
    args = args[: args.index(">>")] if ">>" in args else args
    command, ctx = parse_cli(args)
    assert command.name == "submit" and ctx.params["new_only"], "a night submits only the new files"
    assert ctx.params["name"].endswith("2025-01-31"), "each night's run is named after its date"


def test_systemd_worker_unit_is_templated_and_stops_gracefully() -> None:
    assert WORKER_UNIT.name.endswith("@.service")
    service = read_unit(WORKER_UNIT)
    assert service["EnvironmentFile"] == "/etc/pipeline/env"
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    assert float(service["TimeoutStopSec"]) >= default("llm_timeout_s")
    assert service["User"] not in ("", "root", "0")
    exe, *args = shlex.split(service["ExecStart"].replace("%i", "1").replace("%H", "host"))
    assert Path(exe).name == "pipeline" and Path(exe).is_absolute()
    assert "%i" in service["ExecStart"]  # instances need distinct Celery node names
    command, _ = parse_cli(args)
    assert command.name == "worker"


@pytest.mark.parametrize(
    ("path", "name", "env_file"),
    [(BEAT_UNIT, "beat", "/etc/pipeline/env"), (FLOWER_UNIT, "flower", "/etc/pipeline/flower.env")],
)
def test_systemd_beat_and_flower_units_run_existing_commands(path: Path, name: str, env_file: str) -> None:
    service = read_unit(path)
    assert service["EnvironmentFile"] == env_file  # secrets: beat the workers', Flower its own
    assert service["User"] not in ("", "root", "0")
    assert service["Restart"] == "on-failure"
    assert service["ProtectSystem"] == "strict" and service["NoNewPrivileges"] == "yes"
    assert service["WorkingDirectory"] == "/var/lib/pipeline" and service["StateDirectory"] == "pipeline"
    exe, *args = shlex.split(service["ExecStart"])
    assert Path(exe).name == "pipeline" and Path(exe).is_absolute()
    assert args[0] == name
    command, _ = parse_cli(args)
    assert command.name == name


def test_systemd_flower_unit_keeps_the_password_off_its_command_line() -> None:
    service = read_unit(FLOWER_UNIT)
    _, *args = shlex.split(service["ExecStart"])
    assert args == ["flower"]  # address, port and login come from the environment file
    assert "PASSWORD" not in service["ExecStart"].upper() and "basic" not in service["ExecStart"]
    values = env_example(FLOWER_ENV)
    for key in ("PIPELINE_FLOWER_USER", "PIPELINE_FLOWER_PASSWORD", "PIPELINE_FLOWER_ADDRESS"):
        assert key in values, f"{key} missing from {FLOWER_ENV.name}"
    assert values["PIPELINE_FLOWER_ADDRESS"] == Settings.model_fields["flower_address"].default


# -- Prometheus -----------------------------------------------------------------------------


def test_prometheus_scrapes_flowers_metrics_with_a_password_file() -> None:
    yaml = pytest.importorskip("yaml", reason="pyyaml is needed to parse ops/prometheus.yml")
    config = yaml.safe_load(PROMETHEUS.read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "pipeline-flower"]
    assert job["metrics_path"] == METRICS_PATH
    (static,) = job["static_configs"]
    port = Settings.model_fields["flower_port"].default
    assert static["targets"] == [f"127.0.0.1:{port}"]
    auth = job["basic_auth"]
    assert "password" not in auth and Path(auth["password_file"]).is_absolute()
    assert (
        auth["username"]
        == env_example()["PIPELINE_FLOWER_USER"]
        == env_example(FLOWER_ENV)["PIPELINE_FLOWER_USER"]
    )


# -- names the deployment files give the code -----------------------------------------------


def settings_env_names() -> set[str]:
    """Every environment variable the settings read: PIPELINE_<FIELD>, or a field's aliases."""
    prefix = Settings.model_config.get("env_prefix", "")
    names: set[str] = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        choices = getattr(alias, "choices", None)
        if choices:
            names.update(str(choice) for choice in choices)
        else:
            names.add(str(alias) if isinstance(alias, str) else f"{prefix}{name}".upper())
    return names


def test_every_pipeline_variable_the_deployment_sets_is_a_setting(compose: dict[str, Any]) -> None:
    """A misspelt PIPELINE_ variable is ignored by the settings, silently: each one the compose
    file's services, the env examples and the units set is one the settings read."""
    known = settings_env_names()
    given = {f"compose x-pipeline-env: {k}" for k in compose["x-pipeline-env"]}
    for name, svc in compose["services"].items():
        given |= {f"compose {name}: {k}" for k in svc.get("environment", {})}
    # .env.example also sets the compose file's own variables (the image tag): those given to no
    # container are not the settings'.
    environments = [
        compose["x-pipeline-env"],
        *(svc.get("environment", {}) for svc in compose["services"].values()),
    ]
    passed = {v for env in environments for value in env.values() for v in compose_variables(str(value))}
    compose_only = compose_variables(COMPOSE.read_text()) - passed
    for path in (ENV_EXAMPLE, FLOWER_ENV):
        given |= {f"{path.name}: {k}" for k in env_example(path) if k not in compose_only}
    for path in (WORKER_UNIT, BEAT_UNIT, FLOWER_UNIT):
        given |= {f"{path.name}: {k}" for k in re.findall(r"\b(PIPELINE_[A-Z0-9_]+)=", path.read_text())}
    pipeline_names = {g for g in given if g.rsplit(": ", 1)[1].startswith("PIPELINE_")}
    assert len(pipeline_names) > 20, "the check found the variables"
    unknown = sorted(g for g in pipeline_names if g.rsplit(": ", 1)[1] not in known)
    assert not unknown, f"not settings: {unknown}"


def test_settings_env_names_catch_a_misspelt_variable() -> None:
    known = settings_env_names()
    assert {"PIPELINE_DATABASE_URL", "PIPELINE_FLOWER_PASSWORD", "OPENAI_API_KEY"} <= known
    assert "PIPELINE_DATABSE_URL" not in known and "PIPELINE_LLM_URL" not in known


def healthcheck_code(svc: dict[str, Any]) -> str:
    """The Python a service's exec-form healthcheck runs (`CMD python -c CODE`)."""
    kind, python, flag, code = svc["healthcheck"]["test"]
    assert (kind, python, flag) == ("CMD", "python", "-c"), "exec form: no shell, the image's Python"
    compile(code, "healthcheck", "exec")
    return str(code)


def test_the_simulators_healthcheck_asks_what_the_simulator_serves(
    services: dict[str, dict[str, Any]],
) -> None:
    from pipeline_dev.sim import SimConfig, SimServer

    sim = services["sim"]
    code = healthcheck_code(sim)
    _, ctx = parse_cli(as_args(sim["command"]))
    found = re.search(r"http://127\.0\.0\.1:(\d+)(/\S*?)['\"]", code)
    assert found and int(found[1]) == ctx.params["port"], "the check asks the port the simulator listens on"
    with SimServer(SimConfig(p50_s=0, p95_s=0)) as running:  # the check's code, run against it
        exec(code.replace(f"127.0.0.1:{found[1]}", f"127.0.0.1:{running.port}"), {})
        broken = code.replace(found[2], "/v1/nothing-here")
        with pytest.raises(urllib.error.HTTPError):
            exec(broken.replace(f"127.0.0.1:{found[1]}", f"127.0.0.1:{running.port}"), {})


def test_flowers_healthcheck_asks_flowers_api_on_its_port(services: dict[str, dict[str, Any]]) -> None:
    from flower.urls import handlers

    code = healthcheck_code(services["flower"])
    port = re.search(r'os\.environ\.get\("PIPELINE_FLOWER_PORT", "(\d+)"\)', code)
    assert port and int(port[1]) == Settings.model_fields["flower_port"].default
    path = re.search(r'f"http://127\.0\.0\.1:\{port\}(/[^"]*)"', code)
    patterns = [spec[0] if isinstance(spec, tuple) else spec.regex.pattern for spec in handlers]
    patterns = [p for p in patterns if p != ".*"]  # its page for what it does not serve
    assert path and any(re.fullmatch(p.rstrip("$"), path[1]) for p in patterns), f"Flower serves no {path}"
