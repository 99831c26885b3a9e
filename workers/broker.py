"""kombu's Redis transport, with a worker that survives its broker restarting.

When the connection to Redis drops, Celery closes the channel, and closing hands the
worker's unacknowledged messages back to their queue, through a connection kombu has already
released: `AttributeError: 'NoneType' object has no attribute 'hostname'`, which Celery
treats as unrecoverable, and the worker exits (seen in tests/test_chaos.py with kombu 5.7;
kombu#582 and #970 report the same path). Here that hand-back is skipped with a warning. The
messages stay in Redis's unacknowledged set: Redis gives them out again after the visibility
timeout, and the watchdog or `pipeline resume` finishes their documents sooner.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)


class QoS(kombu_redis.QoS):
    def restore_unacked(self, client: Any = None) -> Any:
        try:
            return super().restore_unacked(client)  # type: ignore[no-untyped-call]
        except AttributeError as exc:  # the connection is gone: nothing can be restored now
            log.warning(
                "could not hand %d unacknowledged messages back to Redis (%s); they return "
                "after the visibility timeout, or at once with `pipeline resume`",
                len(self._delivered),
                exc,
            )
            return None


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel
