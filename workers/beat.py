"""`pipeline beat`'s scheduler: Celery's persistent (file) scheduler, firing only while it holds
its schedule's lease (`pipeline.recovery.beat_lease`), and sending the nightly submit with the
slot it is for (`pipeline.core.cron.latest_fire`), which the task claims once
(`pipeline.runs.nightly.claim_slot`).
"""

from __future__ import annotations

import copy
import logging
from typing import Any
from urllib.parse import urlsplit

import redis
from celery.beat import PersistentScheduler, ScheduleEntry

from pipeline.core.constants import REDIS_CLIENT_OPTIONS
from pipeline.core.cron import latest_fire
from pipeline.core.settings import get_settings
from pipeline.recovery.beat_lease import ScheduleLease
from workers.app import LOCAL_REDIS_URL

log = logging.getLogger(__name__)

NIGHTLY = "pipeline.nightly"


class LeasedScheduler(PersistentScheduler):
    """Fires while this beat holds its schedule's lease; a standby otherwise (see the lease)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings = get_settings()
        url = settings.redis_url or LOCAL_REDIS_URL
        where = urlsplit(url)  # host, port and database: never the password
        broker = f"{where.hostname}:{where.port or 6379}{where.path or '/0'}"
        what = f"inbox {settings.inbox}" if settings.inbox else f"the broker {broker}"
        client = redis.Redis.from_url(url, **REDIS_CLIENT_OPTIONS)
        self.lease = ScheduleLease(client, settings.inbox, settings.lease_s, what)
        self.inbox_schedule = settings.inbox_schedule
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass of the scheduler when this beat holds the lease; the lease renewed (or asked
        for) at least every third of it."""
        try:
            held = self.lease.hold()
        except redis.RedisError as exc:  # no lease confirmed, no message sent: the broker is this Redis
            log.warning("beat: the schedule's lease cannot be read (%s): nothing fired until it can", exc)
            return self.lease.renew_every_s
        if not held:
            return self.lease.renew_every_s
        return float(min(super().tick(*args, **kwargs), self.lease.renew_every_s))

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        """The fence: nothing is sent once the lease is another beat's (this one was paused)."""
        try:
            held = self.lease.still_held()
        except redis.RedisError as exc:
            log.warning("beat: %s not sent, the schedule's lease cannot be read (%s)", entry.name, exc)
            return
        if held:
            super().apply_entry(entry, producer=producer)

    def apply_async(
        self, entry: ScheduleEntry, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> Any:
        """The nightly submit carries the slot it fires for: a fire late or twice (a standby's
        catching up, a second beat) is then refused by the task, not paid for again."""
        if entry.task == NIGHTLY:
            slot = latest_fire(self.inbox_schedule, self.app.now())
            entry = copy.copy(entry)
            entry.kwargs = {**(entry.kwargs or {}), "slot": slot.isoformat(timespec="minutes")}
        return super().apply_async(entry, producer=producer, advance=advance, **kwargs)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.lease.release()
