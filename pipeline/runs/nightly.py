"""The nightly run (beat, PIPELINE_INBOX_SCHEDULE): the inbox's new content, as one run."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING, Any

import redis

from pipeline.core import keys
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


SLOT_TTL_S = 7 * 24 * 3600
"""How long a slot's claim is kept: longer than any beat's catching up on a slot it missed."""


def slot_key(inbox: str, slot: str) -> str:
    return keys.NIGHTLY.of(f"{os.path.normpath(inbox)}@{slot}")


def claim_slot(client: redis.Redis, inbox: str, slot: str, claimant: str) -> str | None:
    """Take the nightly submit of `inbox` for the scheduled `slot` (beat's: "2026-12-06T01:30+00:00");
    None when this caller has it, else what the claim says (who took it, or its run). Two
    beats, or a beat catching up on a slot the one before it fired, submit it once: the fire is
    what gets paid."""
    key = slot_key(inbox, slot)
    if client.set(key, claimant, nx=True, ex=SLOT_TTL_S):
        return None
    found: Any = client.get(key)
    return (found.decode() if isinstance(found, bytes) else found) or claimant


def slot_taken_by(client: redis.Redis, inbox: str, slot: str, what: str) -> None:
    """The claim says what came of it (`run <id>`, or that nothing was new), for a second fire's log."""
    client.set(slot_key(inbox, slot), what, xx=True, ex=SLOT_TTL_S)


def free_slot(client: redis.Redis, inbox: str, slot: str) -> None:
    """The claimed submit failed before storing anything: a fire sent again for the slot may try."""
    client.delete(slot_key(inbox, slot))
