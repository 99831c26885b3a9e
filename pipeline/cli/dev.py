"""Development tools on the command line: `pipeline sim` and `pipeline bench`.

They live in `pipeline_dev`, imported here inside the commands: the one place production code
reaches the dev tools (import-linter allows exactly these edges).
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from pipeline.cli.base import console, fail, main
from pipeline.core.settings import get_settings


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8900, show_default=True, help="0 picks a free port.")
@click.option("--p50", default=0.05, show_default=True, help="Median latency, seconds.")
@click.option("--p95", default=0.2, show_default=True, help="95th percentile latency, seconds.")
@click.option(
    "--seed", type=int, default=None, help="Seed of latencies, faults and answers (default: random)."
)
@click.option("--rpm", default=0, show_default=True, help="Provider requests/min limit (0: none).")
@click.option("--tpm", default=0, show_default=True, help="Provider tokens/min limit (0: none).")
@click.option("--window-s", default=60.0, show_default=True, help="The provider's sliding window, seconds.")
@click.option(
    "--quantize/--no-quantize",
    default=True,
    show_default=True,
    help="Also enforce limit/window per second, as providers do (OpenAI's rate-limit guide).",
)
@click.option(
    "--error-rate",
    default=0.0,
    show_default=True,
    help="Share of chat requests answered with a 500, 502 or 503.",
)
@click.option(
    "--drop-rate",
    default=0.0,
    show_default=True,
    help="Share of chat requests whose connection is closed without an answer.",
)
@click.option(
    "--hang-rate",
    default=0.0,
    show_default=True,
    help="Share of chat requests held open unanswered for 10 minutes (the client's timeout ends them).",
)
@click.option(
    "--bad-json-rate",
    default=0.0,
    show_default=True,
    help="Share of answers whose JSON is broken as models break it (unquoted keys, a trailing comma).",
)
@click.option(
    "--truncate-rate",
    default=0.0,
    show_default=True,
    help="Share of answers whose content is cut off, its JSON left unclosed.",
)
@click.option(
    "--ungrounded-rate",
    default=0.0,
    show_default=True,
    help="Share of quotes replaced by text not in the document (deterministic with --seed).",
)
@click.option(
    "--wrong-figure-rate",
    default=0.0,
    show_default=True,
    help="Share of money figures misread (x10, /10, +-25 %), their quotes kept (deterministic with --seed).",
)
@click.option(
    "--made-up-rate",
    default=0.0,
    show_default=True,
    help="Share of quoted items made up whole: quote invented, title replaced, figure misread.",
)
@click.option(
    "--faithful-model",
    "faithful_models",
    multiple=True,
    help="A model answered without --ungrounded-rate and --wrong-figure-rate (repeatable): a "
    "stronger model to escalate to.",
)
@click.option(
    "--cache-answers",
    is_flag=True,
    help="Give a request the answer composed for the same request before (no CPU for a repeated run).",
)
@click.option(
    "--reject-shape",
    "rejected_shapes",
    multiple=True,
    type=click.Choice(["json_schema", "json_object_schema", "json_object"]),
    help="Answer requests of this structured-output shape with an error naming response_format.",
)
@click.option("--reject-status", default=500, show_default=True, help="The status of that error.")
@click.option("--api-key", "sim_api_key", default=None, help="Refuse any other key with 401.")
@click.option(
    "--echo-key",
    is_flag=True,
    help="Every error quotes the request's API key whole (OpenAI masks it): the redaction test's worst case.",
)
@click.option("--serve-model", "served_models", multiple=True, help="Refuse any other model with 404.")
@click.option(
    "--context-tokens", default=0, show_default=True, help="Refuse prompt + max_tokens above it (400)."
)
@click.option(
    "--unsupported-param", "unsupported_params", multiple=True, help="Refuse requests with it (400)."
)
@click.option(
    "--record",
    "record_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Append every request as a JSON line to this file.",
)
@click.option(
    "--batch-duration",
    "batch_duration_s",
    default=2.0,
    show_default=True,
    help="Seconds a batch is in_progress; its lines complete spread over them.",
)
@click.option(
    "--batch-validate-s",
    default=0.2,
    show_default=True,
    help="Seconds a batch is validating (and finalizing, and cancelling).",
)
@click.option(
    "--batch-fail-rate",
    default=0.0,
    show_default=True,
    help="Share of batch lines answered with a 500 (in the error file).",
)
@click.option(
    "--batch-expire-after",
    "batch_expire_after_s",
    default=86_400.0,
    show_default=True,
    help="Seconds after its creation a batch not finished expires (the 24h window).",
)
@click.option(
    "--batch-enqueued-tokens",
    default=0,
    show_default=True,
    help="Enqueued-token limit: prompt + max_tokens of unfinished batches' lines (0: none).",
)
@click.option(
    "--outage-after",
    "outage_after_s",
    default=0.0,
    show_default=True,
    help="Seconds after the start that an outage (--outage-for) begins.",
)
@click.option(
    "--outage-for",
    "outage_for_s",
    default=0.0,
    show_default=True,
    help="An outage this many seconds long: every chat completion refused (0: none; POST "
    '/sim/outage {"seconds": N} starts one while the simulator runs).',
)
@click.option(
    "--outage-kind",
    type=click.Choice(["503", "500", "reset"]),
    default="503",
    show_default=True,
    help="How the outage refuses: 503 (overloaded), 500, or reset (the connection dropped).",
)
@click.option(
    "--flex-slowdown",
    default=3.0,
    show_default=True,
    help='Flex processing (service_tier "flex"): answers this many times slower than the standard tier.',
)
@click.option(
    "--flex-unavailable-rate",
    default=0.0,
    show_default=True,
    help='Share of flex requests refused with 429 "Resource Unavailable" (not charged).',
)
@click.option(
    "--prompt-cache-ttl",
    "prompt_cache_ttl_s",
    default=300.0,
    show_default=True,
    help="Seconds a cached prompt prefix stays after its last use (0: no prompt caching).",
)
@click.option(
    "--reject-prompt-cache-key",
    is_flag=True,
    help="Refuse requests with prompt_cache_key (400), as servers that check parameters strictly do.",
)
@click.option(
    "--prices",
    "sim_prices",
    default="",
    help="model:input/output[/cached],... USD per million tokens: what GET /sim/bill prices usage at.",
)
def sim(
    host: str,
    port: int,
    p50: float,
    p95: float,
    seed: int | None,
    rpm: int,
    tpm: int,
    window_s: float,
    quantize: bool,
    error_rate: float,
    drop_rate: float,
    hang_rate: float,
    bad_json_rate: float,
    truncate_rate: float,
    ungrounded_rate: float,
    wrong_figure_rate: float,
    made_up_rate: float,
    faithful_models: tuple[str, ...],
    cache_answers: bool,
    rejected_shapes: tuple[str, ...],
    reject_status: int,
    sim_api_key: str | None,
    echo_key: bool,
    served_models: tuple[str, ...],
    context_tokens: int,
    unsupported_params: tuple[str, ...],
    record_path: str | None,
    batch_duration_s: float,
    batch_validate_s: float,
    batch_fail_rate: float,
    batch_expire_after_s: float,
    batch_enqueued_tokens: int,
    outage_after_s: float,
    outage_for_s: float,
    outage_kind: str,
    flex_slowdown: float,
    flex_unavailable_rate: float,
    prompt_cache_ttl_s: float,
    reject_prompt_cache_key: bool,
    sim_prices: str,
) -> None:
    """Run the OpenAI-compatible LLM simulator.

    For tests, dry runs and benchmarks: answers chat completions and the Batch API with
    latency, provider-style limits and the faults asked for."""
    from pipeline_dev.sim import SimConfig, serve

    try:
        config = SimConfig(
            p50_s=p50,
            p95_s=p95,
            seed=seed,
            rpm=rpm,
            tpm=tpm,
            window_s=window_s,
            quantize=quantize,
            error_rate=error_rate,
            drop_rate=drop_rate,
            hang_rate=hang_rate,
            bad_json_rate=bad_json_rate,
            truncate_rate=truncate_rate,
            ungrounded_rate=ungrounded_rate,
            wrong_figure_rate=wrong_figure_rate,
            made_up_rate=made_up_rate,
            faithful_models=faithful_models,
            cache_answers=cache_answers,
            record_path=record_path,
            rejected_shapes=rejected_shapes,
            rejected_status=reject_status,
            api_key=sim_api_key,
            echo_key=echo_key,
            served_models=served_models,
            context_tokens=context_tokens,
            unsupported_params=unsupported_params,
            batch_duration_s=batch_duration_s,
            batch_validate_s=batch_validate_s,
            batch_fail_rate=batch_fail_rate,
            batch_expire_after_s=batch_expire_after_s,
            batch_enqueued_tokens=batch_enqueued_tokens,
            outage_after_s=outage_after_s,
            outage_for_s=outage_for_s,
            outage_kind=outage_kind,
            flex_slowdown=flex_slowdown,
            flex_unavailable_rate=flex_unavailable_rate,
            prompt_cache_ttl_s=prompt_cache_ttl_s,
            reject_prompt_cache_key=reject_prompt_cache_key,
            prices=sim_prices,
        )
    except ValueError as exc:  # a knob out of range, a bad --prices entry
        fail(f"pipeline sim: {exc}")
    serve(host, port, config)


@main.command()
@click.option(
    "--regimes",
    default="R1,R1t,R1z,R2,R3,R4,R5,R6,peer-R1,peer-R4",
    show_default=True,
    help="Comma-separated regimes to run (pipeline_dev/bench/regimes.py describes each).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".pipeline/bench"),
    show_default=True,
    help="Directory for bench.md, its charts and each regime's numbers.",
)
@click.option("--scale", default=1.0, show_default=True, help="Multiplies every regime's document count.")
@click.option("--window-s", default=60.0, show_default=True, help="The simulated provider's window.")
@click.option("--rpm", default=600, show_default=True, help="The simulated provider's requests per window.")
@click.option("--tpm", default=2_400_000, show_default=True, help="R1t's tokens per window.")
@click.option(
    "--pacing/--no-pacing",
    default=True,
    show_default=True,
    help="Workers pace calls at the quota's rate (off: the sliding window alone, for comparison).",
)
@click.option(
    "--p50", default=1.42, show_default=True, help="Median latency of the rate- and latency-bound regimes."
)
@click.option("--p95", default=3.81, show_default=True, help="Their 95th percentile latency.")
@click.option(
    "--workers",
    default=2,
    show_default=True,
    type=click.IntRange(min=1),
    help="Worker processes of each run (R5 keeps its one).",
)
@click.option(
    "--concurrency",
    default=32,
    show_default=True,
    type=click.IntRange(min=1),
    help="Threads of each worker (R5 keeps its 64).",
)
@click.option(
    "--finalize-documents",
    default="500,20000",
    show_default=True,
    help="Comma-separated documents of the finalize regime's runs (scaled by --scale too).",
)
def bench(
    regimes: str,
    out_dir: Path,
    scale: float,
    window_s: float,
    rpm: int,
    tpm: int,
    pacing: bool,
    p50: float,
    p95: float,
    workers: int,
    concurrency: int,
    finalize_documents: str,
) -> None:
    """Measure the pipeline against a provider's limit and the peer.

    Side by side, regime by regime. Uses PIPELINE_DATABASE_URL when set (else a SQLite file),
    a private Redis, and the simulator.
    """
    from pipeline_dev.bench.main import run_bench

    names = [r.strip() for r in regimes.split(",") if r.strip()]
    try:
        finalize_sizes = [int(n) for n in finalize_documents.split(",") if n.strip()]
    except ValueError:
        fail(
            f"--finalize-documents {finalize_documents}: give whole numbers separated by commas, e.g. 500,20000"
        )
    try:
        run_bench(
            names,
            out_dir=out_dir,
            database_url=get_settings().database_url,
            scale=scale,
            window_s=window_s,
            rpm=rpm,
            tpm=tpm,
            pacing=pacing,
            p50_s=p50,
            p95_s=p95,
            workers=workers,
            concurrency=concurrency,
            finalize_sizes=finalize_sizes,
            say=lambda line: console.print(escape(line)),
        )
    except ValueError as exc:
        fail(str(exc))
    click.echo((out_dir / "bench.md").read_text())
