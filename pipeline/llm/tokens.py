"""Token estimates: tiktoken where it knows the model and its encoding is at hand."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from pipeline.core.constants import CONSERVATIVE_CHARS_PER_TOKEN

log = logging.getLogger(__name__)
MESSAGE_OVERHEAD_TOKENS = 4
"""Role and separators per chat message."""

Counter = Callable[[str], int]


def conservative(text: str) -> int:
    """An over-estimate (about 3 characters a token), the safe side for reservations."""
    return -(-len(text) // CONSERVATIVE_CHARS_PER_TOKEN)


@functools.lru_cache(maxsize=16)
def counter_for(model: str) -> Counter:
    """tiktoken's encoder for `model` when tiktoken knows it and can load it (the encoding
    files are downloaded once, or read from TIKTOKEN_CACHE_DIR); the conservative estimate
    otherwise. Decided once per model per process."""
    try:
        import tiktoken

        encoding = tiktoken.encoding_for_model(model)
    except Exception as exc:  # unknown model, or no encoding file and no network
        log.info("token estimates for %s are conservative: %s", model, type(exc).__name__)
        return conservative
    return lambda text: len(encoding.encode(text, disallowed_special=()))


def estimate_prompt(model: str, messages: Sequence[dict[str, Any]]) -> int:
    count = counter_for(model)
    return sum(count(str(m.get("content") or "")) + MESSAGE_OVERHEAD_TOKENS for m in messages) + 3
