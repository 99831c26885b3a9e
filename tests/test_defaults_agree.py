"""Every default agrees: each PIPELINE_* value that .env.example, docker-compose.yml, the image,
the systemd units, the README's configuration table and the generated reference
(docs/configuration.md) state is the code's default (Settings), unless it is listed in DIFFERENT
with the reason a deployment file sets another value.

Values are compared after parsing by Settings itself, so `0.10` and `0.1`, `true` and `True`
agree, and a name that is no setting (a typo) fails as well."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pipeline.core.settings import Settings
from tests.test_deploy_files import (
    COMPOSE,
    DOCKERFILE,
    ENV_EXAMPLE,
    FLOWER_ENV,
    ROOT,
    dockerfile_instructions,
    interpolate,
)

README = ROOT / "README.md"
REFERENCE = ROOT / "docs" / "configuration.md"
UNITS = sorted((ROOT / "ops" / "systemd").glob("*.service"))

NOT_SETTINGS = {
    "PIPELINE_IMAGE_TAG": "the tag of the image compose builds",
    "PIPELINE_DB_WAIT_TRIES": "ops/prestart.sh's own",
    "PIPELINE_DB_WAIT_DELAY_S": "ops/prestart.sh's own",
}
DIFFERENT = {
    "PIPELINE_DATABASE_URL": "a deployment's service URL (unset: the SQLite file of `pipeline run`)",
    "PIPELINE_REDIS_URL": "a deployment's service URL (unset: the embedded Redis of `pipeline run`)",
    "PIPELINE_LLM_BASE_URL": "a deployment talks to a real endpoint (unset: the simulator, `pipeline run` only)",
    "PIPELINE_WORKER_CONCURRENCY": "a worker container or host of its own: 16 threads (the code's 8 suits a laptop)",
    "PIPELINE_INBOX": "compose mounts the host's INBOX_DIR on the workers at /data/inbox",
    "PIPELINE_TASK_EVENTS": "compose runs Flower, which lists task events",
    "PIPELINE_DATA_DIR": "the image keeps its state in /var/lib/pipeline (beat's schedule: a volume)",
    "PIPELINE_FLOWER_USER": "a login has no default: `pipeline flower` refuses to start without one",
    "PIPELINE_FLOWER_PASSWORD": "a login has no default: .env.example's is the placeholder change-me",
}
"""Names whose deployment value differs from the code's default, and why."""


def env_names() -> dict[str, str]:
    """PIPELINE_* environment name → Settings field."""
    return {f"PIPELINE_{name.upper()}": name for name in Settings.model_fields}


def parsed(name: str, value: str) -> Any:
    """`value` of the environment variable `name` as Settings reads it ('' is unset)."""
    field = env_names()[name]
    if value == "":
        return None
    return getattr(Settings(_env_file=None, **{field: value}), field)  # type: ignore[arg-type]


def default(name: str) -> Any:
    return Settings.model_fields[env_names()[name]].get_default(call_default_factory=True)


def disagreements(where: str, values: dict[str, str]) -> list[str]:
    wrong = []
    for name, value in values.items():
        if name in NOT_SETTINGS:
            continue
        if name not in env_names():
            wrong.append(f"{where}: {name} is not a setting")
        elif name not in DIFFERENT and parsed(name, value) != default(name):
            wrong.append(f"{where}: {name}={value!r}, the code's default is {default(name)!r}")
    return wrong


# -- the sources ----------------------------------------------------------------------------


def env_example_values(path: Path = ENV_EXAMPLE) -> dict[str, str]:
    """PIPELINE_*=value lines of .env.example (or Flower's env file), commented-out ones
    (# KEY=value) included, a double-quoted value without its quotes."""
    found = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^#?\s*(PIPELINE_[A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            value = m[2].strip()
            quoted = re.fullmatch(r'"(.*)"', value)
            found[m[1]] = quoted[1] if quoted else value
    return found


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def compose_values(compose: dict[str, Any]) -> dict[str, str]:
    """PIPELINE_* values compose passes with nothing in .env: each ${VAR:-default}'s default;
    required ones (${VAR:?…}) come from .env and are left out."""
    found = {}
    environments = [compose["x-pipeline-env"]] + [
        s.get("environment") or {} for s in compose["services"].values()
    ]
    for environment in environments:
        for name, raw in environment.items():
            value = interpolate(str(raw))
            if name.startswith("PIPELINE_") and not re.search(r"<[A-Z_]+>", value):
                found[name] = value
    return found


def unit_values() -> dict[str, str]:
    """Environment=PIPELINE_…=value lines of the systemd units."""
    found = {}
    for unit in UNITS:
        for m in re.finditer(r"^Environment=\"?(PIPELINE_[A-Z0-9_]+)=([^\"\n]*)", unit.read_text(), re.M):
            found[m[1]] = m[2]
    return found


def image_values() -> dict[str, str]:
    """PIPELINE_* ENV of the image."""
    env = " ".join(args for ins, args in dockerfile_instructions() if ins == "ENV")
    return dict(re.findall(r"(PIPELINE_[A-Z0-9_]+)=(\S+)", env))


def comment_values() -> dict[str, str]:
    """What the deployment files' comments say of a default: `(PIPELINE_X, 60 s by default)`."""
    found = {}
    for path in [COMPOSE, ENV_EXAMPLE, *UNITS, DOCKERFILE]:
        text = re.sub(r"\n\s*#\s*", " ", path.read_text())  # comments wrapped over lines
        for m in re.finditer(r"(PIPELINE_[A-Z0-9_]+)[,:]? (\S+?)(?: s)? by default", text):
            found[m[1]] = m[2]
    return found


def readme_defaults() -> dict[str, str]:
    """The README's configuration table (the settings most deployments set): its `default` cells
    that are one literal (`60`, `true`) or `none`; `PIPELINE_A_B` / `_C` rows name PIPELINE_A_C
    too, each with its part of the cell."""
    section = README.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    found = {}
    for row in re.findall(r"^\| (`PIPELINE_.*?) \| (.*?) \| .* \|$", section, re.M):
        names = re.findall(r"`(PIPELINE_[A-Z0-9_]+|_[A-Z0-9_]+)`", row[0])
        cells = [c.strip() for c in row[1].split(" / ")]
        if len(cells) != len(names):
            cells = [row[1].strip()] * len(names)
        first = names[0]
        for short, cell in zip(names, cells, strict=True):
            name = short if short.startswith("PIPELINE_") else _expand(first, short)
            literal = re.fullmatch(r"`([^`]*)`(?: \(none\))?", cell)
            if cell == "none" or (literal and literal[1] in env_names()):
                found[name] = ""  # unset (another setting's value then applies)
            elif literal:
                found[name] = literal[1]
    return found


def reference_defaults() -> dict[str, str]:
    """The generated reference's rows: every environment name of a setting with its default
    (`60`, or unset)."""
    found = {}
    for names, cell in re.findall(
        r"^\| (`[A-Z][A-Z0-9_]*`(?: or `[A-Z0-9_]+`)*) \| (.*?) \| ", REFERENCE.read_text(), re.M
    ):
        literal = re.fullmatch(r"`([^`]*)`", cell)
        for name in re.findall(r"`([A-Z0-9_]+)`", names):
            if name.startswith("PIPELINE_"):
                found[name] = literal[1] if literal else ("" if cell == "unset" else cell)
    return found


def _expand(first: str, short: str) -> str:
    """`_TPM` after `PIPELINE_RATE_LIMIT_RPM`: the setting named by replacing the first's
    trailing parts with it."""
    parts = first.split("_")
    for cut in range(len(parts), 1, -1):
        name = "_".join(parts[:cut]) + short
        if name in env_names():
            return name
    raise AssertionError(f"the README's {short} after {first} names no setting")


# -- the tests ------------------------------------------------------------------------------


def test_env_example_states_the_codes_defaults() -> None:
    values = env_example_values()
    assert "PIPELINE_LLM_TIMEOUT_S" in values and len(values) >= 20
    assert disagreements(".env.example", values) == []
    flower = env_example_values(FLOWER_ENV)
    assert "PIPELINE_FLOWER_PORT" in flower
    assert disagreements(FLOWER_ENV.name, flower) == []


def test_compose_passes_the_codes_defaults(compose: dict[str, Any]) -> None:
    values = compose_values(compose)
    assert "PIPELINE_LLM_MODEL" in values
    assert disagreements("docker-compose.yml", values) == []
    # The worker's thread count: one figure for compose and .env.example.
    worker = " ".join(str(a) for a in compose["services"]["worker"]["command"])
    assert interpolate(worker).split()[-1] == env_example_values()["PIPELINE_WORKER_CONCURRENCY"]


def test_the_image_and_the_systemd_units_set_the_codes_defaults() -> None:
    assert "PIPELINE_DATA_DIR" in image_values()
    assert disagreements(str(DOCKERFILE.relative_to(ROOT)), image_values()) == []
    assert disagreements("ops/systemd", unit_values()) == []


def test_the_deployment_files_comments_state_the_codes_defaults() -> None:
    # The worker's grace period once said "in-flight LLM calls (timeout 120 s)": the code's is 60.
    values = comment_values()
    assert "PIPELINE_LLM_TIMEOUT_S" in values
    assert disagreements("a comment", values) == []


def test_the_readmes_configuration_table_states_the_codes_defaults() -> None:
    values = readme_defaults()
    for name in ("PIPELINE_LLM_TIMEOUT_S", "PIPELINE_RATE_LIMIT_TPM", "PIPELINE_INBOX_SCHEDULE"):
        assert name in values, name
    assert disagreements("README's configuration table", values) == []


def test_the_configuration_reference_states_the_codes_defaults() -> None:
    # Right by construction (tests/test_config_reference.py: the page is what the generator
    # writes); this reads the written page back through Settings, as a user would copy a value.
    values = reference_defaults()
    assert set(env_names()) <= set(values)
    assert disagreements("docs/configuration.md", values) == []


def test_a_changed_default_is_found() -> None:
    # The check is worth something only if it fails: the timeout 120 these files once said.
    assert disagreements("x", {"PIPELINE_LLM_TIMEOUT_S": "120"}) == [
        "x: PIPELINE_LLM_TIMEOUT_S='120', the code's default is 60.0"
    ]
    assert disagreements("x", {"PIPELINE_LLM_TIMEOUT": "60"}) == ["x: PIPELINE_LLM_TIMEOUT is not a setting"]
    assert parsed("PIPELINE_RUN_FAILURE_THRESHOLD", "0.10") == default("PIPELINE_RUN_FAILURE_THRESHOLD")


def test_every_difference_is_still_one() -> None:
    """A name in DIFFERENT that agrees everywhere no longer needs its reason."""
    stated: dict[str, set[str]] = {}
    yaml = pytest.importorskip("yaml")
    sources = [env_example_values(), compose_values(yaml.safe_load(COMPOSE.read_text())), image_values()]
    for values in [*sources, env_example_values(FLOWER_ENV), unit_values(), readme_defaults()]:
        for name, value in values.items():
            stated.setdefault(name, set()).add(value)
    for name in DIFFERENT:
        assert name in stated, f"{name}: no file states it; drop it from DIFFERENT"
        assert any(v == "" or differs(name, v) for v in stated[name]), name


def differs(name: str, value: str) -> bool:
    """`value` is not the default: another value, or one Settings refuses (a URL with the
    placeholder password .env.example shows, which no default can be)."""
    try:
        return bool(parsed(name, value) != default(name))
    except ValidationError:
        return True
