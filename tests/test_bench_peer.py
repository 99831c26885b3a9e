"""The naive peer baseline against the in-thread simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_dev.bench.peer import run_peer
from pipeline_dev.sim import SimConfig, SimServer
from pipeline_dev.synth_filings import write_filings


def filings(directory: Path) -> list[Path]:
    write_filings(directory, 5, seed=1, sizes=[20_000] * 5)
    return sorted(directory.glob("*.txt"))


def test_peer_extracts_the_first_6000_characters_of_each_filing(tmp_path: Path) -> None:
    paths = filings(tmp_path)
    with SimServer(SimConfig(p50_s=0, p95_s=0)) as sim:
        result = run_peer(paths, sim.base_url)
    assert result.documents == 5 and result.extracted == 5 and result.lost == 0
    assert result.requests == 5 and result.refused_429 == 0
    assert result.text_share == pytest.approx(6000 / 20_000, rel=0.1)
    assert result.wall_s > 0


def test_peer_loses_filings_to_a_tight_rate_limit(tmp_path: Path) -> None:
    paths = filings(tmp_path)
    with SimServer(SimConfig(rpm=3, window_s=60, p50_s=0, p95_s=0)) as sim:
        result = run_peer(paths, sim.base_url, backoff_base_s=0.01)
    assert result.refused_429 > 0
    assert result.lost > 0 or result.extracted < 5
    assert result.extracted + result.lost == 5
    assert result.requests == result.extracted + result.refused_429
