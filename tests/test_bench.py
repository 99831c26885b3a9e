"""The benchmark harness runs end to end at a tiny size, so that it cannot rot.

One regime, R1, goes the whole way: its own Redis, a simulator with a provider's per-second
quota, a worker, `submit --wait`, the simulator's counters, the database's outcome, and
`bench.json`, `bench.md` and the chart written from them; peer-R1 adds the asyncio baseline the
chart compares with. The intake regime (no model, a few seconds) runs too, on fixture-like EDGAR
files and a 5 MB submission. This asserts nothing about speed.

The other regimes are the same harness with other arguments, and each costs a worker's start-up
and a run (about 10 s apiece, 170 s for all twelve): the suite does not run them. After a change
to `pipeline_dev/bench`, run them all at this size with `pipeline bench --regimes
R1,R1t,R1z,R2,R3,R4,R5,R6,R7,R8,peer-R1,peer-R4` and the arguments of TINY (docs/testing.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline_dev.bench.regimes import REGIMES
from tests.conftest import run_cli

TINY = [
    "--scale",
    "0.005",
    "--window-s",
    "3",
    "--rpm",
    "30",
    "--tpm",
    "100000",
    "--p50",
    "0.05",
    "--p95",
    "0.2",
    "--workers",
    "1",
    "--concurrency",
    "8",
]


def run_tiny_bench(out: Path, regimes: list[str], *extra: str) -> dict[str, Any]:
    """`pipeline bench` at tiny sizes on SQLite; returns bench.json, having checked bench.md."""
    result = run_cli(
        "bench",
        "--regimes",
        ",".join(regimes),
        *TINY,
        *extra,
        "--out",
        str(out),
        env={"PIPELINE_DATABASE_URL": ""},
        timeout_s=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = json.loads((out / "bench.json").read_text())
    assert list(data["results"]) == regimes
    table = (out / "bench.md").read_text()
    assert all(f"| {name} |" in table for name in regimes)
    return data


def test_the_rate_bound_regime_and_its_peer_run_at_a_tiny_size(tmp_path: Path) -> None:
    data = run_tiny_bench(tmp_path / "bench", ["R1", "peer-R1"])
    r1, peer = data["results"]["R1"], data["results"]["peer-R1"]
    assert r1["lost"] == 0 and r1["documents"] == r1["statuses"]["extracted"]
    assert r1["requests"] >= r1["documents"], "each filing asked at least once"
    assert r1["theoretical_min_s"] > 0 and r1["provider_timeline"], "the provider's view, second by second"
    assert 0 < peer["text_share"] < 1, "the peer reads only the start of each filing"
    chart = (tmp_path / "bench" / "bench.svg").read_text()
    assert "R1" in chart and "peer" in chart


def test_the_intake_regime_measures_edgar_files_at_a_tiny_size(tmp_path: Path) -> None:
    """Fixture-like 10-Ks and a 5 MB complete submission (mapped, as a 100 MB one is)."""
    data = run_tiny_bench(tmp_path / "bench", ["intake"])
    intake = data["results"]["intake"]
    assert 0.8 < intake["sent_per_readable"] <= 1.15, "the text sent is the readable text"
    generated = intake["by_group"]["generated html"]
    assert generated["ten_ks"] >= 2
    assert all(generated[item] == generated["ten_ks"] for item in ("Item 1A", "Item 7", "Item 8"))
    assert intake["uuencoded_lines"] == 0, "no uuencoded part is sent"
    made = intake["by_group"]["generated submission"]
    assert made["sent"] > 0 and made["flagged"] == 0, "EDGAR's own SGML tags are not an injection"
    assert intake["submission_mb"] >= 5 and intake["load_problem"] is None
    assert intake["load_taken"] == ["10-K", "EX-13"] and intake["load_left_out"] > 0
    assert intake["load_hwm_mb"] >= intake["load_baseline_mb"] > 0, "memory read from /proc in the child"
    assert intake["html_mb_per_cpu_s"] > 0 and intake["met"]


def test_the_finalize_regime_finds_the_synthesizing_worker_at_a_tiny_size(tmp_path: Path) -> None:
    """One run (400 documents at scale 0.005: 2) on a fresh worker; the regime's sizes are an option."""
    data = run_tiny_bench(tmp_path / "bench", ["finalize"], "--finalize-documents", "400")
    found = data["results"]["finalize"]
    assert list(found["runs"]) == ["2"] and found["lost"] == 0 and found["peak_ratio"] == 1
    run = found["runs"]["2"]
    assert run["synthesizing_worker_peak_mb"] > 0, "the worker whose log says it wrote the report"
    assert run["report_markdown_kb"] > 0 and run["finalize_s"] is not None


def test_every_regime_named_in_the_benchmarks_page_is_one_the_bench_runs() -> None:
    page = (Path(__file__).parents[1] / "docs" / "benchmarks.md").read_text()
    assert set(REGIMES) >= {"R1", "R1t", "R1z", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "peer-R1"}
    assert all(f"{name}" in page for name in REGIMES), sorted(n for n in REGIMES if n not in page)
