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
    for chart in ("revenue", "risks", "latency", "cost"):  # the timeline's depends on the seconds
        assert f'id="chart-{chart}"' in page
    assert 'id="chart-grounding"' not in page, "20 equal bars say nothing (chart_rules)"
    assert "Every quote of the 22 filings was found in its filing" in page
    for filing in truth:
        assert escape(filing["company"]) in page
    # Nothing it started is left running: the SQLite file is all that remains.
    assert (tmp_path / ".pipeline" / "pipeline.db").exists()
    if shutil.which("pgrep"):
        leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
        assert leftover.stdout.strip() == ""


def _quick_start_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh shell: no PIPELINE_* or OPENAI_* setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINE_", "OPENAI_"))}
    return {**env, **extra}


def test_a_compose_env_file_does_not_turn_the_quick_start_into_a_paid_run(tmp_path: Path) -> None:
    shutil.copy(ROOT / ".env.example", tmp_path / ".env")  # `cp .env.example .env`, as for compose
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(ROOT / "examples" / "filings")],
        cwd=tmp_path,
        env=_quick_start_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert (
        "pipeline run would send the filings to api.openai.com (PIPELINE_LLM_BASE_URL from .env), "
        "a real provider that may charge for them: pass --yes to go ahead"
    ) in result.stderr
    assert result.stdout == "" and not (tmp_path / ".pipeline").exists()  # nothing started
