"""The Celery app: configuration only.

Delivery is at-least-once: a task is acknowledged after it ran (acks_late) and put back
when its worker dies (reject_on_worker_lost); each worker thread reserves one message at
a time (prefetch 1) so long extractions do not sit behind each other. Redis redelivers an
unacknowledged message after the visibility timeout, which is set above the longest task.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

from celery import Celery, signals
from celery.schedules import crontab

from pipeline.core import logs, redaction
from pipeline.core.constants import (
    EXTRACT_QUEUE,
    REDIS_CLIENT_OPTIONS,
    REDIS_TIMEOUT_S,
    REPORT_QUEUE,
    TASK_HARD_TIME_LIMIT_S,
    TASK_SOFT_TIME_LIMIT_S,
    VISIBILITY_TIMEOUT_S,
)
from pipeline.core.settings import Settings, get_settings
from workers.backend import backend_url

RESULT_EXPIRES_S = 24 * 3600
"""Results are kept a day: under `noeviction` a week of nightly runs piled up. The chords count
those of extract and compress; finalize's and nightly's say what they did (a word, a run id);
synthesize, the watchdog and the early documents outside the chord keep none. A chord whose
results expired first is finished by the workers' heartbeats (every document final, no report)."""
SOFT_SHUTDOWN_S = 60.0
LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"


PRUNE_CRONTAB = {"minute": "15", "hour": "4"}
"""When beat sends the nightly prune (with PIPELINE_RETENTION_DAYS): 04:15, after the nightly
submit's default 01:30 has started its run (a run still going is never pruned)."""
PRUNE_EXPIRES_S = 12 * 3600
"""A prune not started within this long (no report-queue worker) gives way to the next night's."""


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """What `pipeline beat` sends: the watchdog always, the nightly inbox when one is set (its
    path goes with the task: a worker without PIPELINE_INBOX of its own still reads beat's),
    and the nightly prune when PIPELINE_RETENTION_DAYS is set (beat's age goes with it)."""
    schedule: dict[str, dict[str, Any]] = {
        "watchdog": {
            "task": "pipeline.watchdog",
            "schedule": settings.watchdog_interval_s,
            # A pass that waited longer than one interval is superseded by the next.
            "options": {"expires": settings.watchdog_interval_s},
        },
    }
    if settings.inbox:
        minute, hour, day, month, weekday = settings.inbox_schedule.split()
        schedule["nightly"] = {
            "task": "pipeline.nightly",
            "args": (settings.inbox,),
            "schedule": crontab(
                minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday
            ),
        }
    if settings.retention_days is not None:
        schedule["prune"] = {
            "task": "pipeline.prune",
            "args": (settings.retention_days * 86_400,),
            "schedule": crontab(**PRUNE_CRONTAB),
            "options": {"expires": PRUNE_EXPIRES_S},
        }
    return schedule


@signals.after_setup_logger.connect
@signals.after_setup_task_logger.connect
def _structured_logs(logger: logging.Logger, **_: Any) -> None:
    """Worker and task logs carry the run and document ids; JSON lines on request."""
    logs.install(logger, get_settings().log_format)


def redis_timeouts() -> dict[str, Any]:
    """The broker's and the result backend's connect and read timeouts and TCP keepalive, as
    every Redis client of ours has (`REDIS_CLIENT_OPTIONS`): a silent peer (a failover, a NAT
    that dropped the connection) is then an error within seconds, which Celery retries as an
    outage, not a publish or a chord count blocked for good under a document's lease.

    The broker's socket options are its transport's (`broker_transport_options`). Its BRPOP
    waits on the server for 1 s (kombu's `polling_interval`, unset here), below the read
    timeout, so an idle queue never reads as a timeout; kombu's own health check drops a BRPOP
    connection whose answer is overdue. The backend does not retry a timed-out command: its
    chord count (RPUSH, INCR) may have run, and run again it would count a part twice."""
    return {
        "broker_connection_timeout": REDIS_TIMEOUT_S,
        "redis_socket_timeout": REDIS_TIMEOUT_S,
        "redis_socket_connect_timeout": REDIS_TIMEOUT_S,
        "redis_socket_keepalive": True,
        "redis_retry_on_timeout": False,
    }


def create_app() -> Celery:
    redaction.install_logging()  # however the worker was started: its log records are redacted
    settings = get_settings()
    redis_url = settings.redis_url or LOCAL_REDIS_URL
    app = Celery(
        "pipeline",
        broker=redis_url,
        backend=backend_url(redis_url),
        include=[  # every task module: a worker registers only the tasks of modules it imports
            "workers.extract_tasks",
            "workers.report_tasks",
            "workers.run_tasks",
            "workers.scheduled_tasks",
            "workers.heartbeat",
        ],
        events="workers.events:RedactingEvents",  # what Flower receives, redacted
    )
    transport = {"visibility_timeout": VISIBILITY_TIMEOUT_S}
    app.conf.update(
        **redis_timeouts(),
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # Below the visibility timeout, so a task is never handed out twice while it runs.
        # Enforced by the prefork pool; under threads the extract task's own time budget
        # (PIPELINE_TASK_TIME_BUDGET_S, checked between chunks) and every call's timeout do.
        task_soft_time_limit=TASK_SOFT_TIME_LIMIT_S,
        task_time_limit=TASK_HARD_TIME_LIMIT_S,
        worker_prefetch_multiplier=1,
        # No worker_cancel_long_running_tasks_on_connection_loss: it does nothing under the
        # thread pool. A task goes on through a broker outage under its document's lease; the
        # unacknowledged message, redelivered hours later, finds the document final.
        # On a warm shutdown (SIGTERM), give in-flight LLM calls time to finish first.
        worker_soft_shutdown_timeout=SOFT_SHUTDOWN_S,
        worker_enable_soft_shutdown_on_idle=True,
        broker_transport="workers.broker:Transport",
        broker_transport_options={**transport, **REDIS_CLIENT_OPTIONS},
        result_backend_transport_options=transport,
        result_expires=RESULT_EXPIRES_S,
        result_extended=False,
        task_default_queue=EXTRACT_QUEUE,
        task_routes={
            "pipeline.finalize": {"queue": REPORT_QUEUE},
            "pipeline.compress": {"queue": REPORT_QUEUE},
            "pipeline.synthesize": {"queue": REPORT_QUEUE},
            "pipeline.synthesize_partial": {"queue": REPORT_QUEUE},
            "pipeline.watchdog": {"queue": REPORT_QUEUE},
            "pipeline.batch_tick": {"queue": REPORT_QUEUE},
            "pipeline.nightly": {"queue": REPORT_QUEUE},
            "pipeline.prune": {"queue": REPORT_QUEUE},
        },
        beat_schedule=beat_schedule(settings),
        broker_connection_retry_on_startup=True,
        # Task events are a Redis PUBLISH each (sent, received, started, succeeded): sent only
        # when configured, or once Flower asks (`pipeline flower` at its start, then Flower every
        # 5 s, with the `enable_events` remote control command). Worker heartbeats always go.
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        worker_hijack_root_logger=False,
    )
    if redis_url.startswith("rediss://"):
        # TLS to Redis: verify the server's certificate unless the URL says otherwise
        # (`?ssl_cert_reqs=none|optional|required`, `ssl_ca_certs=/path`), for broker and backend.
        tls = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
        app.conf.broker_use_ssl = tls
        app.conf.redis_backend_use_ssl = tls
    return app


app = create_app()
