"""Per-process resources, built once at first use and shared by the worker's threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import redis
from celery.signals import worker_process_init, worker_shutting_down

from pipeline.context import Context
from pipeline.core.constants import REDIS_CLIENT_OPTIONS
from pipeline.core.settings import get_settings
from pipeline.llm.client import LLMClient
from pipeline.llm.ratelimit import RedisLimiter
from pipeline.recovery.heartbeat import scope_of
from pipeline.recovery.leases import Leases
from pipeline.storage.db import dispose_engines, get_engine
from workers.app import LOCAL_REDIS_URL

_lock = threading.Lock()
_context: Context | None = None
_redis: redis.Redis | None = None
_stopping = threading.Event()
"""Set by the worker's warm (or cold) shutdown: its tasks stop taking up new chunks (Context.stopping)."""


def worker_context() -> Context:
    """The process's settings, database engine (its connection budget) and LLM client (its pool
    sized to concurrency)."""
    global _context
    with _lock:
        if _context is None:
            settings = get_settings()
            # Threads in this process: a prefork or solo worker's process runs one task at a time.
            pool = settings.worker_concurrency if settings.worker_pool == "threads" else 1
            # Calls come from the task threads (compressions, syntheses) and from the chunk pool.
            calls = 2 * pool
            escalation = settings.escalation_endpoint()
            _context = Context(
                settings=settings,
                # The process's connection budget (PIPELINE_DB_POOL_SIZE), whatever its threads:
                # they hold a connection only inside a step's short transaction, never across a
                # call to the LLM, and the heartbeat takes its turn with them.
                engine=get_engine(settings.resolved_database_url),
                llm=LLMClient(settings, pool_size=calls, limiter=RedisLimiter.from_settings(settings, calls)),
                leases=Leases(settings.lease_s, scope=scope_of(_redis_client())),
                # Under prefork, a child's chunks go one after another (the children are the
                # concurrency); with threads, as many side by side as the worker has threads.
                chunk_pool=(
                    ThreadPoolExecutor(max_workers=pool, thread_name_prefix="pipeline-chunk")
                    if pool > 1
                    else None
                ),
                # Its own endpoint is paced, its spend counted in the run's budget and its outages
                # held by a circuit of its own, as the main one's are (#47: it had none of them).
                escalation=(
                    LLMClient(
                        escalation, pool_size=calls, limiter=RedisLimiter.from_settings(escalation, calls)
                    )
                    if escalation
                    else None
                ),
                stopping=_stopping,
            )
        return _context


def redis_client() -> redis.Redis:
    """The process's Redis client for its own keys (heartbeats, the report lock)."""
    with _lock:
        return _redis_client()


def _redis_client() -> redis.Redis:
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(
            get_settings().redis_url or LOCAL_REDIS_URL,
            max_connections=8,
            **REDIS_CLIENT_OPTIONS,
        )
    return _redis


@worker_process_init.connect
def _reset_after_fork(**_: object) -> None:
    # A forked child must not share its parent's sockets.
    global _context, _redis
    with _lock:
        _context = None
        _redis = None
    dispose_engines(close=False)  # the parent's connections stay the parent's


@worker_shutting_down.connect
def _on_shutting_down(**_: object) -> None:
    # In the worker's main process (under prefork, the children run their tasks to the end).
    # A warm shutdown waits for the tasks running: with this set they end after the calls in
    # flight, handing their documents back, instead of after every chunk of every document.
    _stopping.set()
