"""The benchmark's chart (`bench.svg`) from a results dict, as `pipeline bench` writes it."""

from __future__ import annotations

import re

from pipeline_dev.bench.chart import bench_svg


def test_the_bench_chart_shows_wall_against_the_quota_minimum_and_the_peer() -> None:
    results = {
        "R1": {"wall_s": 256.2, "theoretical_min_s": 236.1},
        "R1t": {"wall_s": 244.3, "theoretical_min_s": 220.9},
        "R2": {"wall_s": 53.7},
        "R4": {"wall_s": 150.9},
        "R5": {"worker_peak_mb": 167.1},
        "peer-R1": {"wall_s": 20.1},
        "peer-R4": {"wall_s": 610.9},
    }
    svg = bench_svg(results)
    assert svg is not None and svg.startswith("<svg") and 'id="chart-bench"' in svg
    labels = set(re.findall(r">([^<>]+)</text>", svg))
    assert {"R1", "R1t", "R2", "R4", "wall", "quota minimum", "this pipeline"} <= labels
    assert "R5" not in labels, "a regime without a wall time is left out"
    assert {"256", "236", "611"} <= labels, "bars carry their seconds"


def test_no_chart_without_a_wall_time() -> None:
    assert bench_svg({}) is None
    assert bench_svg({"R5": {"worker_peak_mb": 100.0}}) is None
    only_peer = bench_svg({"peer-R1": {"wall_s": 20.0}})
    assert only_peer is not None and "Against the peer" in only_peer
