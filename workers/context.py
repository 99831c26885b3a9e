"""Per-process resources, built once at first use and shared by the worker's threads."""

from __future__ import annotations

import threading

from celery.signals import worker_process_init

from pipeline.core.settings import get_settings
from pipeline.extraction.extract import Context
from pipeline.llm.client import LLMClient
from pipeline.llm.ratelimit import RedisLimiter
from pipeline.storage.db import dispose_engines, get_engine

_lock = threading.Lock()
_context: Context | None = None


def worker_context() -> Context:
    """The process's settings, database engine and LLM client (pools sized to concurrency)."""
    global _context
    with _lock:
        if _context is None:
            settings = get_settings()
            pool = settings.worker_concurrency
            _context = Context(
                settings=settings,
                engine=get_engine(settings.resolved_database_url, pool_size=pool),
                llm=LLMClient(settings, pool_size=pool, limiter=RedisLimiter.from_settings(settings, pool)),
            )
        return _context


@worker_process_init.connect
def _reset_after_fork(**_: object) -> None:
    # A forked child must not share its parent's sockets.
    global _context
    with _lock:
        _context = None
    dispose_engines()
