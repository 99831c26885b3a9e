"""The "peer": the naive single-process asyncio baseline from the design brief.

`pipeline bench` compares the pipeline against the common approach it replaces, written
afresh exactly as the brief specifies. It is deliberately naive; do not improve it, or the
comparison stops measuring what the pipeline fixes:

- one asyncio process and one pooled `httpx.AsyncClient` (default limits), as the seeds had;
- `max_retries=0` on the SDK, so only the peer's own backoff retries;
- `asyncio.Semaphore(25)` around each filing's call: the usual concurrency cap;
- a local token bucket (40 requests/s, burst 20) per process, not shared: every extra
  process would add its own 40/s, which is exactly the flaw a global limit removes;
- `asyncio.gather(..., return_exceptions=True)` over all filings: a failure is swallowed;
- exponential backoff on 429 only, 5 attempts (sleeps of 1, 2, 4, 8 s), no jitter, and
  Retry-After ignored; other errors are not retried;
- each filing cut to its first 6,000 characters, one call per filing, so most of a long
  filing is never read (`text_share` measures that);
- the answer validated with `FilingExtraction.model_validate_json`: an invalid answer is
  simply lost, with no repair and no failure record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from pipeline.extraction.schemas import FilingExtraction
from pipeline.llm.prompts import extract_messages, response_format

CONCURRENCY = 25
RATE_PER_S = 40.0
BURST = 20
ATTEMPTS = 5
MAX_CHARS = 6000
MAX_TOKENS = 1500


@dataclass(frozen=True)
class PeerResult:
    documents: int
    extracted: int  # answered and validated
    lost: int  # exceptions or invalid answers: no record of them anywhere
    wall_s: float
    requests: int  # HTTP attempts made
    refused_429: int  # 429 answers received
    text_share: float  # mean over filings of min(1, 6000 / len(text))


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up; local to this process."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst, self.tokens = rate, float(burst), float(burst)
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self.lock:
            while True:
                now = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.rate)


async def run_peer_async(
    paths: Sequence[Path],
    base_url: str,
    *,
    model: str = "sim-1",
    api_key: str = "sk-peer",
    backoff_base_s: float = 1.0,
) -> PeerResult:
    """Extract every filing in `paths` the naive way; `backoff_base_s` only speeds up tests."""
    started = time.perf_counter()
    texts = [path.read_text(encoding="utf-8") for path in paths]
    semaphore = asyncio.Semaphore(CONCURRENCY)
    bucket = TokenBucket(RATE_PER_S, BURST)
    fmt: Any = response_format(FilingExtraction)
    counts = {"requests": 0, "refused_429": 0}

    async with (
        httpx.AsyncClient() as http_client,
        openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client
        ) as client,
    ):

        async def extract(text: str) -> FilingExtraction:
            messages: Any = extract_messages(text[:MAX_CHARS], 0, 1)
            async with semaphore:
                for attempt in range(ATTEMPTS):
                    await bucket.acquire()
                    counts["requests"] += 1
                    try:
                        response = await client.chat.completions.create(
                            model=model, messages=messages, response_format=fmt, max_tokens=MAX_TOKENS
                        )
                    except openai.RateLimitError:
                        counts["refused_429"] += 1
                        if attempt == ATTEMPTS - 1:
                            raise
                        await asyncio.sleep(backoff_base_s * 2**attempt)
                        continue
                    return FilingExtraction.model_validate_json(response.choices[0].message.content or "")
            raise AssertionError("unreachable")

        results = await asyncio.gather(*(extract(text) for text in texts), return_exceptions=True)

    extracted = sum(isinstance(result, FilingExtraction) for result in results)
    shares = [min(1.0, MAX_CHARS / len(text)) if text else 1.0 for text in texts]
    return PeerResult(
        documents=len(texts),
        extracted=extracted,
        lost=len(texts) - extracted,
        wall_s=time.perf_counter() - started,
        requests=counts["requests"],
        refused_429=counts["refused_429"],
        text_share=sum(shares) / len(shares) if shares else 0.0,
    )


def run_peer(paths: Sequence[Path], base_url: str, **kwargs: Any) -> PeerResult:
    """`run_peer_async` on a fresh event loop."""
    return asyncio.run(run_peer_async(paths, base_url, **kwargs))
