"""Prompt caching as OpenAI's prompt-caching guide describes it (pure; time is an argument).

https://platform.openai.com/docs/guides/prompt-caching, read 2026-12-06:

- caching is automatic for prompts of 1,024 tokens or more; a shorter prompt is neither cached
  nor served from the cache;
- a hit is an exact match of the prompt's prefix with a recent request's, and the cached part
  grows in steps of 128 tokens from 1,024 (`usage.prompt_tokens_details.cached_tokens`: 0, 1024,
  1152, 1280, ...): the longest such prefix seen before is what is served;
- cached prefixes stay for 5 to 10 minutes of inactivity (`ttl_s`, 5 minutes here), and a hit is
  activity;
- caches are not shared between models, and the structured-output schema is part of the
  prefix (the request's `scope`: the simulator keys on its `response_format`);
- `prompt_cache_key` only steers routing, so that requests sharing a prefix meet on one machine:
  the simulator has one machine, and ignores it.

Tokens are counted as the simulator counts them everywhere (`request.estimate_tokens`: a token
is CHARS_PER_TOKEN characters), so a 128-token step is a block of 128 x CHARS_PER_TOKEN
characters of the prompt's text. Each block is remembered by a hash of the whole prefix it
ends, the way a provider's prefix cache keys its blocks: a lookup walks the prompt's blocks
until the first one not remembered.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from pipeline_dev.sim.request import CHARS_PER_TOKEN, estimate_tokens

MIN_CACHED_TOKENS = 1024
"""The shortest prompt cached, and the smallest hit."""
STEP_TOKENS = 128
"""Hits grow in steps of this many tokens."""
BLOCK_CHARS = STEP_TOKENS * CHARS_PER_TOKEN
DEFAULT_TTL_S = 300.0
"""Five minutes of inactivity: the short end of the guide's "5 to 10 minutes"."""
MAX_BLOCKS = 1_000_000
"""Remembered blocks at most (half a gigabyte of prompt text, about 200 MB of the simulator's
memory): the least recently used go first."""


class PromptCache:
    """The prefixes of recent prompts, per model and scope, each block with its last use."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S, max_blocks: int = MAX_BLOCKS) -> None:
        self.ttl_s = ttl_s
        self.max_blocks = max_blocks
        self._used: OrderedDict[bytes, float] = OrderedDict()
        """Block key -> when last used, least recently used first. A prompt's blocks are touched
        from its last to its first, so a prefix's blocks are never older than the blocks after
        them: whatever is dropped first from the front, a remembered block's prefix is whole."""

    def __len__(self) -> int:
        return len(self._used)

    def clear(self) -> None:
        self._used.clear()

    def serve(self, model: str, scope: str, prompt: str, now: float) -> int:
        """The cached tokens of a request for `model` with `prompt` at `now` (seconds, any
        monotonic clock): the longest remembered prefix in 128-token steps, 0 under 1,024. The
        prompt's own blocks are then remembered (a prompt of 1,024 tokens or more), as of `now`."""
        self._expire(now)
        if self.ttl_s <= 0 or estimate_tokens(prompt) < MIN_CACHED_TOKENS:
            return 0
        keys = block_keys(model, scope, prompt)
        matched = 0
        for key in keys:
            if key not in self._used:
                break
            matched += 1
        for key in reversed(keys):
            self._used[key] = now
            self._used.move_to_end(key)
        while len(self._used) > self.max_blocks:
            self._used.popitem(last=False)
        cached = matched * STEP_TOKENS
        return cached if cached >= MIN_CACHED_TOKENS else 0

    def _expire(self, now: float) -> None:
        """Forget the blocks unused for longer than the TTL (they are at the front)."""
        while self._used:
            key, last = next(iter(self._used.items()))
            if now - last <= self.ttl_s:
                return
            del self._used[key]


def block_keys(model: str, scope: str, prompt: str) -> list[bytes]:
    """A key per whole 128-token block of `prompt`: the hash of the model, the scope and the
    prompt up to the block's end."""
    running = hashlib.sha1(f"{model}\x00{scope}\x00".encode())
    keys = []
    for start in range(0, len(prompt) - BLOCK_CHARS + 1, BLOCK_CHARS):
        running.update(prompt[start : start + BLOCK_CHARS].encode("utf-8", "surrogatepass"))
        keys.append(running.digest())
    return keys
