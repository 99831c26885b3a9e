"""The token encodings a process builds: one of each, however many threads ask for it at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap

THREADS = 4

ASK_AT_ONCE = textwrap.dedent(
    f"""
    import threading
    from pipeline.llm import tokens

    barrier = threading.Barrier({THREADS})
    got = []

    def ask():
        barrier.wait()
        got.append(tokens.encoding("o200k_base"))

    threads = [threading.Thread(target=ask) for _ in range({THREADS})]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(len({{id(found) for found in got}}), len(got))
    """
)


def test_threads_asking_at_once_for_an_encoding_share_one() -> None:
    """A worker's extracting threads all count a filing context's tokens from their first
    filing on: each built its own o200k_base (~50 MB apiece, kept by the process: a 32-thread
    worker reached 1.6 GB in its first seconds). Asked for at once in a fresh process, it is
    built once and every thread gets that one."""
    done = subprocess.run(
        [sys.executable, "-c", ASK_AT_ONCE], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.split() == ["1", str(THREADS)], done.stderr


KEPT = textwrap.dedent(
    """
    import gc, tracemalloc
    tracemalloc.start()
    from pipeline.llm import tokens

    found = tokens.encoding("o200k_base")
    gc.collect()
    print(tracemalloc.get_traced_memory()[0])
    print(*found.encode("Total revenues were $4.2 billion in fiscal 2023.", disallowed_special=()))
    """
)


def test_an_encoding_keeps_no_python_copy_of_its_ranks() -> None:
    """tiktoken's Encoding kept the Python dict of ranks it was built from (o200k_base's 200,000
    bytes objects, ~27 MB traced, ~26 MB of a worker's resident set) beside the Rust encoder's
    own copy, for pickling alone; the cached layout's worker peaked at 253 MB, over the 250 MB
    goal. It is let go: what Python allocated for the encoding is under 10 MB (old code: 26.9),
    and the counts are tiktoken's, token for token."""
    done = subprocess.run(
        [sys.executable, "-c", KEPT], capture_output=True, text=True, timeout=300, check=True
    )
    traced, ids = done.stdout.splitlines()
    assert int(traced) < 10_000_000, done.stdout
    assert [int(i) for i in ids.split()] == [
        8270,
        51285,
        1504,
        548,
        19,
        13,
        17,
        12842,
        306,
        24933,
        220,
        1323,
        18,
        13,
    ]


WARM_UP = textwrap.dedent(
    """
    from pipeline.core.constants import PROMPT_VERSIONS
    from pipeline.extraction import prompting
    from pipeline.llm import tokens

    prompting.warm_up(PROMPT_VERSIONS["compact"])
    print(*sorted(tokens._encodings) or ["none"])
    prompting.warm_up(PROMPT_VERSIONS["cached"])
    print(*sorted(tokens._encodings) or ["none"])
    """
)


def test_the_cached_layout_s_warm_up_builds_the_context_s_encoding_and_the_compact_one_none() -> None:
    """A worker warms up for the layout of its environment's runs before it takes a task: the
    cached layout builds the encoding the filing's context is counted with (on the first
    filing, it held every thread for 0.3-0.7 s); the compact layout loads none (~50 MB)."""
    done = subprocess.run(
        [sys.executable, "-c", WARM_UP], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.splitlines() == ["none", "o200k_base"], done.stderr
