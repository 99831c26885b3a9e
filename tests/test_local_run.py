"""The README's first command: `pipeline run examples/filings` with nothing configured."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_pipeline_run_on_the_examples_with_embedded_parts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINE_", "OPENAI_"))}
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(ROOT / "examples" / "filings")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "SIMULATOR" in result.stderr
    found = re.search(r"report: (\S+\.md)", result.stderr)
    assert found, result.stderr
    report = Path(found.group(1))
    assert report.parent.parent == tmp_path / ".pipeline"
    markdown = report.read_text()
    assert "SIMULATED RUN" in markdown
    truth = json.loads((ROOT / "examples" / "truth.json").read_text())["filings"]
    for filing in truth:
        assert filing["company"] in markdown
    run_id = result.stdout.strip().splitlines()[-1]
    assert run_id in report.name
    page = report.with_suffix(".html").read_text()
    assert "SIMULATED RUN" in page and "Content-Security-Policy" in page
    for chart in ("revenue", "risks", "grounding", "timeline", "latency", "cost"):
        assert f'id="chart-{chart}"' in page
    for filing in truth:
        assert escape(filing["company"]) in page
    # Nothing it started is left running: the SQLite file is all that remains.
    assert (tmp_path / ".pipeline" / "pipeline.db").exists()
    if shutil.which("pgrep"):
        leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
        assert leftover.stdout.strip() == ""
