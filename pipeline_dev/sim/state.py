"""The server's mutable state: counters, limiter, RNG, and the request recorder."""

from __future__ import annotations

import asyncio
import json
import math
import queue
import random
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, fields
from typing import Any

from aiohttp import web

from pipeline.core.settings import default
from pipeline_dev.sim.bill import Bill
from pipeline_dev.sim.config import SimConfig
from pipeline_dev.sim.limits import SlidingWindowLimiter
from pipeline_dev.sim.outage import Outages, kind_of
from pipeline_dev.sim.prompt_cache import PromptCache
from pipeline_dev.sim.request import ChatRequest, Composed

BUSY_SHARE = 0.9


class _Zeroed:
    def reset(self) -> None:
        for item in fields(self):  # type: ignore[arg-type]
            setattr(self, item.name, 0)


@dataclass
class Counters(_Zeroed):
    """What GET /sim/stats reports (plus the limiter's busiest windows)."""

    requests_total: int = 0  # every POST to /v1/chat/completions
    bad_request_400: int = 0
    admitted: int = 0  # answered 200
    rejected_429: int = 0
    rejected_per_second: int = 0  # of those, by the per-second quantum (the minute had room)
    errors_5xx: int = 0
    dropped: int = 0
    hung: int = 0
    cancelled: int = 0  # the client went away before its answer was due
    bad_json: int = 0
    truncated: int = 0
    prompt_tokens: int = 0  # of the 200 answers
    cached_tokens: int = 0  # of those prompt tokens, served from the prompt cache
    completion_tokens: int = 0
    quotes: int = 0  # quote fields in intact JSON answers
    ungrounded_quotes: int = 0  # of those, replaced by text not in the document (--ungrounded-rate)
    outage_refused: int = 0  # refused by an outage (--outage-for, POST /sim/outage), before anything else
    flex_requests: int = 0  # asked with service_tier "flex"
    flex_unavailable: int = 0  # of those, refused 429 "Resource Unavailable" (--flex-unavailable-rate)


@dataclass
class BatchCounters(_Zeroed):
    """The Batch API's part of GET /sim/stats (its lines count in none of the counters above)."""

    batches_created: int = 0
    batches_completed: int = 0
    batches_failed: int = 0  # at validation, or over the enqueued-token limit
    batches_expired: int = 0
    batches_cancelled: int = 0
    batch_lines_answered: int = 0  # answered 200: in an output file
    batch_lines_failed: int = 0  # answered with an error status (4xx, 5xx): in an error file
    batch_lines_expired: int = 0  # not answered before the batch expired (batch_expired)
    batch_lines_cancelled: int = 0  # not answered before the batch was cancelled (batch_cancelled)
    batch_prompt_tokens: int = 0  # of the lines answered 200
    batch_cached_tokens: int = 0  # of those prompt tokens, served from the prompt cache
    batch_completion_tokens: int = 0
    batch_quotes: int = 0  # quote fields in intact JSON answers
    batch_ungrounded_quotes: int = 0


class Recorder:
    """Appends one JSON line per request to a file, on its own thread.

    The event loop only enqueues, so a slow disk never stalls request handling.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        # Opened here, not on the thread, so a bad path fails the server's start.
        self._out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by the thread
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="pipeline-sim-recorder", daemon=True)
        self._thread.start()

    def write(self, entry: dict[str, Any]) -> None:
        self._queue.put_nowait(entry)

    def close(self) -> None:
        """Write what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        with self._out as out:
            while (entry := self._queue.get()) is not None:
                out.write(json.dumps(entry, ensure_ascii=False) + "\n")
                if self._queue.empty():
                    out.flush()


LISTED_MODELS = ("sim-1", default("llm_model"))
"""What GET /v1/models lists before any request named a model: its own name and the pipeline's
default model (gpt-4o-mini), so that the README's dry run, `pipeline sim` then `pipeline doctor`
with nothing else set, finds the model it calls."""


class SimState:
    """Everything the handlers share; used from the event loop thread only."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.flex_rng = random.Random(
            None if config.seed is None else config.seed + 1
        )  # flex draws apart: the fault sequence stays as seeded
        self.limiter = SlidingWindowLimiter(config.rpm, config.tpm, config.window_s, quantize=config.quantize)
        self.counters = Counters()
        self.batch_counters = BatchCounters()
        self.enqueued_tokens = 0  # of the batches not yet finished (the Batch API keeps it)
        self.models: set[str] = set(LISTED_MODELS)
        self.in_flight = 0
        self.most_in_flight = 0  # since the start or the last reset
        self.next_id = 0
        self.shutdown = asyncio.Event()
        self.recorder: Recorder | None = None
        self.invented_quotes: list[str] = []  # GET /sim/invented
        self.admissions: list[tuple[float, int]] = []  # (monotonic s, tokens charged) per admitted request
        self.refusals: list[float] = []  # monotonic s of each 429
        self.batch_api_errors: deque[int] = deque()
        """Statuses the next Files and Batches API requests are answered with (POST /sim/batch-api-errors)."""
        self.answers: dict[bytes, Composed] = {}  # --cache-answers: composed answers by request
        self.copies_seen: set[bytes] = set()  # `[[sim:slowcopy]]` requests had, by model and messages
        self.prompt_cache = PromptCache(config.prompt_cache_ttl_s)
        self.bill = Bill()
        """Usage served, by model and tier (GET /sim/bill prices it)."""
        self.outages = Outages()
        if config.outage_for_s > 0:
            self.outages.schedule(config.outage_after_s, config.outage_for_s, kind_of(config.outage_kind))

    def record(
        self,
        model: Any,
        messages: Any,
        response_format_type: str | None,
        status: int | str,
    ) -> None:
        """One line in the record file, when recording is on."""
        if self.recorder is not None:
            self.recorder.write(
                {
                    "ts": time.time(),
                    "model": model,
                    "messages": messages,
                    "response_format_type": response_format_type,
                    "status": status,
                }
            )

    def stats(self) -> dict[str, Any]:
        """Counters, the limiter's busiest 60 s windows, and the configured limits."""
        return {
            **asdict(self.counters),
            "in_flight": self.in_flight,
            "most_in_flight": self.most_in_flight,
            "window_s": self.limiter.window_s,
            "max_admitted_in_any_60s_window": self.limiter.max_requests_in_window,
            "max_tokens_in_any_60s_window": self.limiter.max_tokens_in_window,
            "rpm": self.config.rpm,
            "tpm": self.config.tpm,
            "quantized": self.limiter.quantum is not None,
            **self._admissions(),
            "timeline": self.timeline(),
            "ungrounded_rate": self.config.ungrounded_rate,
            "wrong_figure_rate": self.config.wrong_figure_rate,
            "made_up_rate": self.config.made_up_rate,
            "faithful_models": list(self.config.faithful_models),
            **asdict(self.batch_counters),
            "batch_enqueued_tokens": self.enqueued_tokens,
            "batch_enqueued_token_limit": self.config.batch_enqueued_tokens,
            "outage": self.outages.stats(),
        }

    def timeline(self) -> list[list[int]]:
        """[admitted, tokens charged, refused] in each second from the first request on: what the
        provider saw of a run, second by second."""
        stamps = [t for t, _ in self.admissions] + self.refusals
        if not stamps:
            return []
        start = min(stamps)
        seconds = [[0, 0, 0] for _ in range(int(max(stamps) - start) + 1)]
        for stamp, tokens in self.admissions:
            second = seconds[int(stamp - start)]
            second[0] += 1
            second[1] += tokens
        for stamp in self.refusals:
            seconds[int(stamp - start)][2] += 1
        return seconds

    def _admissions(self, share: float = BUSY_SHARE) -> dict[str, float]:
        """What the quota was charged (prompt + max_tokens of each admitted request), the span
        from the first admission to the last, and the same for the first `share` of them: the use
        of the quota while a run kept the provider busy, without its last stragglers."""
        charged = sum(tokens for _, tokens in self.admissions)
        if len(self.admissions) < 2:
            return {
                "charged_tokens": charged,
                "admitted_span_s": 0.0,
                "busy_s": 0.0,
                "busy_admitted": 0,
                "busy_charged_tokens": 0,
            }
        last = max(1, math.ceil(len(self.admissions) * share) - 1)
        busy = self.admissions[: last + 1]
        return {
            "charged_tokens": charged,
            "admitted_span_s": self.admissions[-1][0] - self.admissions[0][0],
            "busy_s": busy[-1][0] - busy[0][0],
            "busy_admitted": len(busy) - 1,  # the first opens the span
            "busy_charged_tokens": sum(tokens for _, tokens in busy[1:]),
        }

    def serve_prompt(self, chat: ChatRequest, now: float) -> int:
        """The request's prompt tokens served from the prompt cache (its prefix then cached)."""
        self.prompt_cache.ttl_s = self.config.prompt_cache_ttl_s  # POST /sim/config may change it
        prompt = chat.schema_prefix + chat.prompt  # the schema first, as OpenAI caches it
        return self.prompt_cache.serve(chat.model, chat.cache_scope, prompt, now)

    def invoice(self) -> dict[str, Any]:
        """GET /sim/bill: the usage served, priced with `config.prices`."""
        return self.bill.invoice(self.config.prices)

    def reset(self) -> None:
        """Zero the counters and the bill, forget the limiter's window and the prompt cache (the
        RNG runs on)."""
        self.prompt_cache.clear()
        self.bill.clear()
        self.admissions.clear()
        self.refusals.clear()
        self.counters.reset()
        self.batch_counters.reset()
        self.limiter.reset()
        self.invented_quotes.clear()
        self.most_in_flight = self.in_flight


STATE = web.AppKey("state", SimState)
