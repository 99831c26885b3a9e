"""The nightly run (beat, PIPELINE_INBOX_SCHEDULE): the inbox's new content, as one run."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING

from pipeline.core.settings import Settings
from pipeline.ingest.producer import SubmitPlan, prepare_run

if TYPE_CHECKING:
    from sqlalchemy import Engine


def prepare_nightly(
    engine: Engine,
    settings: Settings,
    today: date | None = None,
    on_early: Callable[[list[int]], None] | None = None,
) -> SubmitPlan | None:
    """Store tonight's run of the inbox's content that no earlier run extracted; None when no
    inbox is configured. The caller enqueues the plan's documents (`on_early`: see
    `prepare_run`)."""
    if not settings.inbox:
        return None
    return prepare_run(
        engine,
        settings,
        [settings.inbox],
        query=settings.inbox_query,
        name=f"nightly-{(today or date.today()).isoformat()}",
        only_new=True,
        on_early=on_early,
    )
