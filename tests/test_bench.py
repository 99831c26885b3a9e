"""The benchmark harness runs end to end at tiny sizes, so that it cannot rot.

This checks that every regime runs and reports; it asserts nothing about speed. The regimes
are split over two files so that the test processes share them (`test_bench_sizes.py`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def run_tiny_bench(out: Path, regimes: list[str]) -> dict[str, Any]:
    """`pipeline bench` at tiny sizes on SQLite; returns bench.json, having checked bench.md."""
    result = run_cli(
        "bench",
        "--regimes",
        ",".join(regimes),
        *TINY,
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


def test_the_rate_latency_overhead_and_fault_regimes_run_at_tiny_sizes(tmp_path: Path) -> None:
    data = run_tiny_bench(tmp_path / "bench", ["R1", "R1t", "R1z", "R2", "R3", "R4"])
    assert all(regime["lost"] == 0 for regime in data["results"].values())
    r1, r1t = data["results"]["R1"], data["results"]["R1t"]
    assert r1["theoretical_min_s"] > 0 and r1["provider_timeline"], "the provider's view, second by second"
    assert r1t["charged_tokens"] > 0 and r1t["theoretical_min_s"] > 0
    assert data["results"]["R3"]["bare_chord_tasks_per_s"] > 0
