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
