"""The benchmark's scale, memory, batch, real-size and peer regimes run end to end at tiny sizes
(see test_bench.py)."""

from __future__ import annotations

from pathlib import Path

from tests.test_bench import run_tiny_bench


def test_the_scale_memory_batch_real_size_and_peer_regimes_run_at_tiny_sizes(tmp_path: Path) -> None:
    data = run_tiny_bench(tmp_path / "bench", ["R6", "R5", "R7", "R8", "peer-R1", "peer-R4"])
    results = data["results"]
    assert results["R6"]["lost"] == 0 and results["R5"]["lost"] == 0
    assert results["R5"]["worker_peak_mb"] > 0 and results["R5"]["producer_10k_peak_mb"] > 0
    assert results["peer-R1"]["text_share"] < 1
    r7, r8 = results["R7"], results["R8"]
    assert r7["lost"] == 0 and r7["batch_answers"] > 0 and r7["sync_cost_usd"] > 0
    assert r7["deadline_batch_answers"] + r7["deadline_sync_answers"] > 0
    assert r8["lost"] == 0 and r8["worker_peak_mb"] > 0 and r8["grounding_ms_per_mb"] is not None
