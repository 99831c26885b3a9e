"""docs/configuration.md is generated from the settings class (pipeline_dev/docs_config.py): it is
exactly what the generator writes, it names every setting with a description, and the generator
names settings as pydantic-settings reads them, nested models included (settings grouped later
into sub-models keep a reference without a change to the generator)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from pydantic import AliasChoices, BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.core import constants
from pipeline.core.settings import GROUPS, Settings, default
from pipeline_dev import docs_config
from pipeline_dev.docs_config import PAGE, REGENERATE, UnnamedSetting, main, render, settings_of


def test_the_reference_is_what_the_generator_writes() -> None:
    assert PAGE.exists(), f"docs/configuration.md is missing: run `{REGENERATE}`"
    assert PAGE.read_text() == render(), docs_config.stale_message(Path("docs/configuration.md"))


def test_every_setting_is_in_the_reference_with_a_description() -> None:
    rows = {row.path: row for row in settings_of()}
    assert set(rows) == set(Settings.model_fields)
    page = PAGE.read_text()
    for name, row in rows.items():
        assert row.description, name
        assert f"| `{row.env[0]}`" in page, name
    assert rows["llm_api_key"].env == ("PIPELINE_LLM_API_KEY", "OPENAI_API_KEY")
    assert rows["llm_timeout_s"].env == ("PIPELINE_LLM_TIMEOUT_S",)
    assert rows["llm_timeout_s"].default == "`60`" and rows["llm_timeout_s"].type == "number (> 0)"
    assert rows["database_url"].default == "unset"
    assert rows["rate_limit_pacing"].default == "`true`"
    assert rows["llm_mode"].type == "`sync` \\| `flex` \\| `batch` \\| `auto`"


def test_every_setting_belongs_to_one_group_and_its_default_is_written_there_once() -> None:
    """The reference has a section per group, and no setting's default is a constant of its
    own elsewhere (a `DEFAULT_*` beside the field that a change of one would leave behind)."""
    declared = [
        name for group in GROUPS for name in group.model_fields if name in inspect.get_annotations(group)
    ]
    assert sorted(declared) == sorted(Settings.model_fields), "a setting outside the groups, or in two"
    page = PAGE.read_text()
    for group in GROUPS:
        assert f"\n## {group.heading}\n" in page, group.__name__  # type: ignore[attr-defined]
    root = Path(__file__).resolve().parents[1] / "pipeline" / "core"
    for module in ("settings.py", "setting_groups.py", "setting_trust.py"):
        assert "DEFAULT_" not in (root / module).read_text(), module
    fixed = {name for name in vars(constants) if name.startswith("DEFAULT_")}
    # The report's calls' answer sizes: fixed values, no settings.
    assert fixed <= {"DEFAULT_COMPRESS_MAX_TOKENS", "DEFAULT_SYNTHESIZE_MAX_TOKENS"}, fixed
    assert default("lease_s") == Settings.model_fields["lease_s"].default


def test_check_fails_on_a_stale_page_and_says_how_to_regenerate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "configuration.md"
    assert main([], page_path=page) == 0
    assert main(["--check"], page_path=page) == 0
    page.write_text(page.read_text().replace("`60`", "`120`", 1))
    assert main(["--check"], page_path=page) == 1
    assert f"run `{REGENERATE}`" in capsys.readouterr().err


# -- nested settings, as issue 31 plans them ---------------------------------------------------


class _Llm(BaseModel):
    model: str = Field(default="gpt-4o-mini", description="the model")
    timeout_s: float = Field(default=60.0, gt=0, description="one call's timeout")


class _Delimited(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOYD_", env_nested_delimiter="__")

    data_dir: str = Field(default=".pipeline", description="where")
    key: str | None = Field(
        default=None, validation_alias=AliasChoices("TOYD_KEY", "TOYD_OLD_KEY"), description="a key"
    )
    llm: _Llm = Field(default_factory=_Llm)


class _Batch(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOYP_BATCH_")

    poll_s: float = Field(default=30.0, description="how often")


class _OwnPrefix(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOYP_")

    batch: _Batch = Field(default_factory=_Batch)


class _Unnamed(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TOYU_")

    llm: _Llm = Field(default_factory=_Llm)


def test_nested_models_under_a_delimiter_are_named_as_pydantic_settings_reads_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = {row.path: row for row in settings_of(_Delimited)}
    assert rows["llm.model"].env == ("TOYD_LLM__MODEL",)
    assert rows["llm.timeout_s"].env == ("TOYD_LLM__TIMEOUT_S",)
    assert rows["llm.timeout_s"].default == "`60`" and rows["llm.model"].group == "llm"
    assert rows["key"].env == ("TOYD_KEY", "TOYD_OLD_KEY")
    monkeypatch.setenv(rows["llm.timeout_s"].env[0], "12.5")
    monkeypatch.setenv(rows["key"].env[1], "deprecated-name")
    read = _Delimited(_env_file=None)  # type: ignore[call-arg]
    assert read.llm.timeout_s == 12.5 and read.key == "deprecated-name"
    page = render(_Delimited)
    assert "\n## General\n" in page and "\n## llm\n" in page and "| `TOYD_LLM__MODEL` |" in page


def test_a_nested_settings_class_is_named_with_its_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    (row,) = settings_of(_OwnPrefix)
    assert (row.path, row.env, row.default) == ("batch.poll_s", ("TOYP_BATCH_POLL_S",), "`30`")
    monkeypatch.setenv("TOYP_BATCH_POLL_S", "5")
    assert _OwnPrefix(_env_file=None).batch.poll_s == 5  # type: ignore[call-arg]


def test_a_setting_no_name_reaches_or_without_a_description_is_refused() -> None:
    with pytest.raises(UnnamedSetting, match="llm is a nested model"):
        settings_of(_Unnamed)

    class Undocumented(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="TOYX_")
        lease_s: float = 30.0

    with pytest.raises(UnnamedSetting, match="lease_s has no description"):
        settings_of(Undocumented)


def test_a_removed_or_misspelt_variable_is_named_and_the_rest_are_not() -> None:
    from pipeline.core.settings import unread_variables

    said = unread_variables(
        [
            "PIPELINE_RATE_LIMIT_MARGIN_S",  # removed: says what replaced it
            "pipeline_lease_sec",  # misspelt, in lower case as .env files may have it
            "PIPELINE_LEASE_S",  # a setting
            "OPENAI_API_KEY",  # an alias of one, and not ours
            "PIPELINE_TEST_DATABASE_URL",  # the test suite's
            "PIPELINE_DB_WAIT_TRIES",  # ops/prestart.sh's
            "HOME",
        ]
    )
    assert said == [
        "PIPELINE_LEASE_SEC is not a setting and is ignored (did you mean PIPELINE_LEASE_S?)",
        "PIPELINE_RATE_LIMIT_MARGIN_S is no longer read: the limiter adds 0.25 s to the provider's "
        "window (issue 31)",
    ]
