"""`pipeline status` reads like a tool: a summary line, compact tables that fit 80 columns,
failure reasons grouped and counted, the structured-output mode and how it was found, the run's
mode and who chose it, and `--json` in the shape docs/status.md describes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from pipeline.core.settings import Settings, get_settings
from pipeline.runs.mode import choose_mode

NOW = datetime(2026, 12, 2, 1, 30, tzinfo=UTC)


@pytest.fixture
def no_mode_in_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("PIPELINE_LLM_MODE", raising=False)
    monkeypatch.chdir("/")  # no .env either
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("no_mode_in_environment")
def test_the_mode_nobody_asked_for_is_called_the_default() -> None:
    choice = choose_mode(get_settings(), None, 60.0, NOW)
    assert (choice.mode, choice.reason) == ("sync", "default: neither --mode nor PIPELINE_LLM_MODE was given")


@pytest.mark.usefixtures("no_mode_in_environment")
def test_a_mode_asked_for_names_who_asked() -> None:
    by_option = get_settings().model_copy(update={"llm_mode": "batch"})  # what `--mode batch` does
    assert choose_mode(by_option, None, 60.0, NOW).reason == "asked for: --mode batch"


def test_a_mode_from_the_environment_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_LLM_MODE", "sync")
    get_settings.cache_clear()
    try:
        assert choose_mode(Settings(), None, 60.0, NOW).reason == "asked for: PIPELINE_LLM_MODE=sync"
    finally:
        get_settings.cache_clear()
