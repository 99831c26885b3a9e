"""The `intake` regime (issue 46): what the EDGAR intake makes of filings, with no model.

On the project's fixtures (tests/fixtures/edgar/, where present) and on fixture-like files made
in code (`edgar_files`): inline-XBRL 10-Ks and a complete submission of 100 MB x `scale` (at
least MIN_SUBMISSION_BYTES, so that it is mapped, not read), all in the run's work directory.

- **tokens sent / readable tokens**: cl100k_base tokens of the intake's text against those of the
  yardstick's readable text (`readable`) of the same HTML (of a submission: its HTML documents the
  intake took);
- **sections**: Items 1A, 7 and 8 found (not doubted) by `sections.locate` in each 10-K;
- **conversion speed**: source MB per CPU second of `read` (one core: the intake is single-threaded);
- **uuencoded lines sent** and **injection flags** on the submissions' text;
- **memory**: loading the big submission through `pipeline.ingest.inputs.load` in a child process
  (`load_peak`): VmHWM against the file's size, and the anonymous memory's peak.
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pipeline.ingest import injection
from pipeline.ingest.filing import read, sgml
from pipeline.ingest.sections import locate
from pipeline.llm.tokens import encoding
from pipeline_dev import synth_edgar
from pipeline_dev.bench import edgar_files
from pipeline_dev.bench.readable import readable_text, squeezed
from pipeline_dev.bench.regimes import BenchConfig, Result
from pipeline_dev.synth_filings import generate_filing

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "edgar"
SUBMISSION_BYTES = 100 * 1024 * 1024
MIN_SUBMISSION_BYTES = 5 * 1024 * 1024
"""Above inputs.MMAP_FROM_BYTES (4 MB): the tiny run takes the mapped path too."""
TEN_KS = 12
TEXT_BYTES = (40_000, 400_000)
"""The generated 10-Ks' plain text, log-uniform between these (1.5-2.5x that as HTML)."""
ITEMS = ("Item 1A", "Item 7", "Item 8")
EXHIBITS = ["EX-13*", "EX-99*"]
MAX_LOAD_ANON_MB = 64
"""The private memory a load may add, whatever the file's size (its mapped pages aside)."""
GOAL = "sent <= 1.15 x readable; Items 1A, 7, 8 in every edgar_files 10-K; no uuencoded line sent; load adds < 64 MB"
_UU_LINE = re.compile(r"^M[\x21-\x60]{60}$", re.MULTILINE)
"""A full uuencoded line (45 bytes as 60 characters after its length letter 'M')."""


def intake(cfg: BenchConfig) -> Result:
    started = time.monotonic()
    work = cfg.work_dir / "intake"
    work.mkdir(parents=True, exist_ok=True)
    files = _fixtures() + _generated(cfg, work)
    speed = {read.HTML: [0.0, 0.0], read.SUBMISSION: [0.0, 0.0]}  # source bytes, CPU s
    groups: dict[str, Counter[str]] = {}
    for origin, data in files:
        cpu = time.process_time()
        got = read.read(data, exhibit_types=EXHIBITS, form_types=["*"])
        if got.format in speed:
            speed[got.format][0] += len(data)
            speed[got.format][1] += time.process_time() - cpu
        groups.setdefault(f"{origin} {got.format}", Counter()).update(_figures(data, got))
    total = sum(groups.values(), Counter())
    # edgar_files' 10-Ks: synth_edgar's keep synth_filings' Item 1A, which for five risk
    # factors is under sections' 1,500-character floor and doubted (a finding, not the intake's)
    generated = [group for key, group in groups.items() if key.startswith("generated")]
    memory = _load_peak(work / "submission.txt")
    sent_per_readable = total["sent"] / max(1, total["readable"])
    result: Result = {
        "documents": len(files),
        "wall_s": round(time.monotonic() - started, 2),
        "sent_per_readable": round(sent_per_readable, 4),
        "by_group": {key: dict(group) for key, group in sorted(groups.items())},
        **{key: total[key] for key in ("sent", "readable", "ten_ks", *ITEMS, "uuencoded_lines", "flagged")},
        "html_mb": round(speed[read.HTML][0] / 2**20, 2),
        "html_mb_per_cpu_s": _rate(*speed[read.HTML]),
        "submission_mb_per_cpu_s": _rate(*speed[read.SUBMISSION]),
        **memory,
        "goal": GOAL,
    }
    result["met"] = (
        sent_per_readable <= 1.15
        and all(made[item] == made["ten_ks"] for made in generated for item in ITEMS)
        and total["uuencoded_lines"] == 0
        and memory["load_anon_mb"] < MAX_LOAD_ANON_MB
    )
    return result


def _figures(data: bytes, got: read.Intake) -> Counter[str]:
    """One file's counts: files, tokens sent and readable, 10-Ks and their items found,
    uuencoded lines sent and injection flags."""
    count = encoding("cl100k_base").encode
    text = got.text or ""
    readable = _readable(data, got)
    figures = Counter(
        files=1,
        sent=len(count(text, disallowed_special=())),
        readable=len(count(readable, disallowed_special=())),
        uuencoded_lines=len(_UU_LINE.findall(text)),
        flagged=int(injection.detect(text) is not None),
    )
    if (got.meta.form or "").upper().startswith("10-K"):
        names = {s.name for s in locate(text, got.meta.form).sections}
        figures.update(ten_ks=1, **{item: int(item in names) for item in ITEMS})
    return figures


def _rate(size_bytes: float, cpu_s: float) -> float:
    return round(size_bytes / 2**20 / max(cpu_s, 1e-9), 2)


def _fixtures() -> list[tuple[str, bytes]]:
    """The project's EDGAR fixtures that are HTML or submissions ("fixture", bytes)."""
    if not FIXTURES.is_dir():
        return []
    found = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.suffix.lower() in (".htm", ".html", ".txt", ".xhtml"):
            data = path.read_bytes()
            if read.format_of(data) in (read.HTML, read.SUBMISSION):
                found.append(("fixture", data))
    return found


def _generated(cfg: BenchConfig, work: Path) -> list[tuple[str, bytes]]:
    """cfg.count(TEN_KS) inline-XBRL 10-Ks of `edgar_files` (a table of contents, "Item&#160;1A"
    in spans, ")" cells), as many of `synth_edgar` (the shipped examples' generator), and the big
    submission (written to `work`)."""
    rng = random.Random(cfg.seed)
    low, high = (math.log(b) for b in TEXT_BYTES)
    made = []
    truths = []
    for index in range(cfg.count(TEN_KS)):
        size = int(math.exp(rng.uniform(low, high))) if cfg.scale >= 1 else TEXT_BYTES[0]
        data, truth = edgar_files.inline_xbrl_10k(index, target_bytes=size, seed=cfg.seed)
        made.append(("generated", data))
        truths.append(truth)
        text, truth = generate_filing(index + 1000, seed=cfg.seed, target_bytes=size)
        made.append(
            ("synth_edgar", synth_edgar.inline_xbrl(text, truth, f"{1_900_000 + index:010d}").encode())
        )
    target = max(MIN_SUBMISSION_BYTES, int(SUBMISSION_BYTES * cfg.scale))
    path = work / "submission.txt"
    edgar_files.submission(path, target_bytes=target, primary=made[0][1], truth=truths[0], seed=cfg.seed)
    made.append(("generated", path.read_bytes()))
    return made


def _readable(data: bytes, got: read.Intake) -> str:
    """The yardstick's readable text of what the intake read: the HTML file itself, or a
    submission's documents it took (HTML by the yardstick, plain text with its spaces squeezed)."""
    if got.format == read.HTML:
        return readable_text(data)
    if got.format != read.SUBMISSION:
        return ""
    taken = {(t.get("type"), t.get("filename")): t.get("format") for t in got.taken}
    texts = []
    for part in sgml.parse(data).parts:
        kind = taken.get((part.type, part.filename))
        raw = bytes(data[part.start : part.end])
        if kind == read.HTML:
            texts.append(readable_text(raw))
        elif kind == read.TEXT:
            texts.append(squeezed(raw.decode("utf-8", "replace")))
    return "".join(texts)


def _load_peak(path: Path) -> dict[str, Any]:
    """`load_peak` on `path` in a child process: its memory figures, prefixed `load_`."""
    done = subprocess.run(
        [sys.executable, "-m", "pipeline_dev.bench.load_peak", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    figures = json.loads(done.stdout)
    return {
        "submission_mb": round(figures["file_mb"], 1),
        "load_problem": figures["problem"],
        "load_taken": figures["taken"],
        "load_left_out": figures["left_out"],
        "load_baseline_mb": round(figures["baseline_hwm_mb"], 1),
        "load_hwm_mb": round(figures["hwm_mb"], 1),
        "load_anon_mb": round(figures["anon_peak_mb"] - figures["anon_before_mb"], 1),
        "load_mapped_mb": round(figures["file_peak_mb"] - figures["file_before_mb"], 1),
        "load_mb_per_cpu_s": round(figures["file_mb"] / max(figures["cpu_s"], 1e-9), 1),
    }
