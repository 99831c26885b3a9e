"""The memory of loading one file through the intake, measured in a process of its own.

    python -m pipeline_dev.bench.load_peak FILE

Prints one JSON object: the file's size, what `pipeline.ingest.inputs.load` made of it, and the
process's memory in MB: `baseline_hwm_mb` (VmHWM once the intake is imported), `hwm_mb` (VmHWM
after the load: the kernel's high-water mark of the resident set, which counts the pages of a
mapped file that were read as well as the heap), and, sampled every SAMPLE_S during the load,
`anon_peak_mb` (RssAnon: the heap and other private memory, what the load allocates) and
`file_peak_mb` (RssFile: pages of mapped files resident, shared with the page cache).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

SAMPLE_S = 0.002


def status_mb(field: str) -> float:
    """A field of /proc/self/status (kB) in MB; 0 where there is no /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main(path: str) -> dict[str, object]:
    from pipeline.ingest.inputs import Reading, load
    from pipeline.ingest.walk import Candidate

    baseline = status_mb("VmHWM")
    anon_before, file_before = status_mb("RssAnon"), status_mb("RssFile")
    peak = [anon_before, file_before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], status_mb("RssAnon"))
            peak[1] = max(peak[1], status_mb("RssFile"))
            time.sleep(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started_wall, started_cpu = time.perf_counter(), time.process_time()
    loaded = load(Candidate(path), 64 * 1024 * 1024, Reading(max_text_bytes=64 * 1024 * 1024))
    cpu_s, wall_s = time.process_time() - started_cpu, time.perf_counter() - started_wall
    done.set()
    sampler.join()
    intake = loaded.intake
    return {
        "file_mb": Path(path).stat().st_size / 2**20,
        "problem": loaded.problem,
        "text_chars": len(loaded.text or ""),
        "taken": [t.get("type") for t in intake.taken] if intake else [],
        "left_out": sum(intake.left_out.values()) if intake else 0,
        "baseline_hwm_mb": baseline,
        "hwm_mb": status_mb("VmHWM"),
        "anon_before_mb": anon_before,
        "anon_peak_mb": max(peak[0], status_mb("RssAnon")),
        "file_before_mb": file_before,
        "file_peak_mb": peak[1],
        "cpu_s": cpu_s,
        "wall_s": wall_s,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
