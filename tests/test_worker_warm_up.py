"""A worker builds what its first document's prompt needs before it takes a task (issue 49)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from pipeline.runtime import embedded
from tests.conftest import WORKER_READY_TIMEOUT_S, claimed_redis_db

BUILT = "token encoding o200k_base built"


@pytest.mark.timeout(180)
def test_a_cached_layout_worker_builds_the_context_s_encoding_before_it_is_ready(
    pipeline_env: dict[str, str], redis_base: str, tmp_path: Path
) -> None:
    """In the cached layout, a worker's first filings waited for the token encoding their
    context is counted with (built on the first one's way, every thread waiting); it is built
    at the worker's start, before it says `ready.` and consumes. A compact-layout worker of a
    model tiktoken does not know (the simulator's) builds none: ~50 MB it does not hold."""
    layouts = ("cached", "compact")
    with claimed_redis_db(redis_base) as redis_url:  # a broker no other worker consumes
        workers = [
            embedded.start_worker(
                embedded.child_env(
                    {**pipeline_env, "PIPELINE_REDIS_URL": redis_url, "PIPELINE_PROMPT_LAYOUT": layout}
                ),
                tmp_path / f"{layout}.log",
                2,
                f"warm-{layout}-{uuid.uuid4().hex[:6]}@%h",
            )
            for layout in layouts
        ]
        try:
            embedded.wait_until_ready(workers, WORKER_READY_TIMEOUT_S)
        finally:
            embedded.stop_all(workers)
    logs = {layout: (tmp_path / f"{layout}.log").read_text(errors="replace") for layout in layouts}
    cached = logs["cached"]
    assert BUILT in cached, cached[-2000:]
    assert cached.index(BUILT) < cached.index("ready."), cached[-2000:]
    assert BUILT not in logs["compact"], logs["compact"][-2000:]


DRY_RUN = textwrap.dedent(
    """
    import os, socket

    endpoint = socket.create_server(("127.0.0.1", 0))
    endpoint.setblocking(False)
    os.environ["PIPELINE_LLM_BASE_URL"] = f"http://127.0.0.1:{endpoint.getsockname()[1]}/v1"
    os.environ["PIPELINE_LLM_MODEL"] = "sim-1"
    from openai.types.chat import ChatCompletion
    from openai.types.chat.chat_completion import Choice

    from pipeline.core.settings import get_settings
    from pipeline.llm.client import LLMClient

    built = [ChatCompletion.__pydantic_complete__, Choice.__pydantic_complete__]
    LLMClient(get_settings(), pool_size=2).warm_up()
    built += [ChatCompletion.__pydantic_complete__, Choice.__pydantic_complete__]
    try:
        endpoint.accept()
        print(*built, "connected")
    except BlockingIOError:
        print(*built, "nothing")
    """
)


def test_the_llm_client_s_warm_up_builds_the_sdk_s_types_and_sends_nothing() -> None:
    """A worker's first call built the SDK's request and response types on its way (~0.2 s
    alone, seconds under a loaded start), inside the structured-output probe that every other
    call of the process waited for. The client's warm-up (at the worker's start) builds them
    with a dry run through an in-process transport: the answer's models are built, and the
    endpoint saw no connection."""
    done = subprocess.run(
        [sys.executable, "-c", DRY_RUN], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.split() == ["False", "False", "True", "True", "nothing"], done.stderr
