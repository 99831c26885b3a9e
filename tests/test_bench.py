"""The benchmark harness runs end to end at tiny sizes, so that it cannot rot.

This checks that every regime runs and reports; it asserts nothing about speed.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli


def test_the_benchmark_runs_every_regime_at_tiny_sizes(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    result = run_cli(
        "bench",
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
        "--out",
        str(out),
        env={"PIPELINE_DATABASE_URL": ""},
        timeout_s=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((out / "bench.json").read_text())
    assert list(data["results"]) == ["R1", "R1t", "R1z", "R2", "R3", "R4", "R6", "R5", "peer-R1", "peer-R4"]
    for name, regime in data["results"].items():
        assert regime["lost"] == 0 or name == "peer-R4", name
    assert data["results"]["R1"]["theoretical_min_s"] > 0
    assert data["results"]["R1t"]["charged_tokens"] > 0 and data["results"]["R1t"]["theoretical_min_s"] > 0
    assert data["results"]["R3"]["bare_chord_tasks_per_s"] > 0
    assert data["results"]["R5"]["worker_peak_mb"] > 0
    assert data["results"]["peer-R1"]["text_share"] < 1
    table = (out / "bench.md").read_text()
    assert "| R1 |" in table and "| peer-R4 |" in table
