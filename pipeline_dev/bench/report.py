"""The benchmark's results as JSON and as the Markdown table docs/benchmarks.md quotes."""

from __future__ import annotations

import os
import platform
from typing import Any

HEADLINE = {
    "R1": ("wall / quota minimum", "ratio_to_min"),
    "R1t": ("wall / token quota minimum", "ratio_to_min"),
    "R1z": ("wall / quota minimum (learned)", "ratio_to_min"),
    "R2": ("throughput / (C / mean latency)", "ratio"),
    "R3": ("docs/s / bare-chord tasks/s", "ratio"),
    "R4": ("extracted share; wall / R1", "extracted_share"),
    "R5": ("peak RSS MB: worker (64 in flight)", "worker_peak_mb"),
    "R6": ("ms per document", "ms_per_document"),
    "R7": ("batch cost / sync cost; deadline run wall / deadline", "cost_ratio"),
    "R8": ("wall / quota minimum; worker peak MB", "ratio_to_min"),
    "R9": ("database MB per 1,000 filings: kept; pruned", "mb_per_1000_kept"),
    "R10": ("auto run's cost / sync cost; wall / deadline", "auto_cost_ratio"),
    "growth": ("read paths' worst time ratio, 10x the documents; pages", "worst_ms_ratio"),
    "finalize": ("synthesizing worker's peak MB, largest run / smallest; peak MB per run", "peak_ratio"),
    "caching": ("cost per filing, cached layout / compact (gpt-4.1-mini's prices)", "cost_ratio"),
    "intake": ("tokens sent / readable; HTML MB/s per core; load VmHWM MB", "sent_per_readable"),
    "submit": ("submit wall, new / old; first extracted s; first taken s", "wall_ratio"),
    "submit-run": ("run wall (submit to report), new / old; submit wall, new / old", "run_wall_ratio"),
    "peer-R1": ("our wall / peer wall", "wall_ratio_ours_to_peer"),
    "peer-R4": ("our wall / peer wall", "wall_ratio_ours_to_peer"),
}


def machine() -> dict[str, Any]:
    memory = None
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        memory = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gib": memory,
    }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:,.1f}"
    return "" if value is None else str(value)


def markdown(results: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Machine: {meta['machine']['cpus']} CPUs, {meta['machine']['memory_gib']} GiB, Python "
        f"{meta['machine']['python']}; database {meta['database']}; scale {meta['scale']}.",
        "",
        "| regime | documents | wall s | headline | value | 429 share | lost | goal | met |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        label, key = HEADLINE.get(name, ("", ""))
        value = _fmt(r.get(key))
        if name == "R4" and r.get("wall_ratio_to_r1") is not None:
            value += f"; {_fmt(r['wall_ratio_to_r1'])}"
        if name == "R5" and r.get("producer_10k_peak_mb") is not None:
            value += f"; producer (10,000 docs) {_fmt(r['producer_10k_peak_mb'])}"
        if name == "R3" and r.get("cpu_s_per_1000_documents") is not None:
            value += (
                f"; CPU s per 1,000: {_fmt(r['cpu_s_per_1000_documents'])} "
                f"(bare chord {_fmt(r.get('bare_chord_cpu_s_per_1000_tasks'))}); "
                f"two-call chord / bare {_fmt(r.get('calls_chord_ratio'))}, "
                f"ours / two-call chord {_fmt(r.get('ratio_to_calls_chord'))}"
            )
        if name == "R8" and r.get("worker_peak_mb") is not None:
            value += f"; {_fmt(r['worker_peak_mb'])}; grounding max {_fmt(r.get('grounding_max_ms'))} ms"
        if name == "R9" and r.get("mb_per_1000_pruned") is not None:
            value += f"; {_fmt(r['mb_per_1000_pruned'])}"
        if name == "R7" and r.get("deadline_s"):
            value += f"; {_fmt(r['deadline_wall_s'] / r['deadline_s'])}"
        if name == "R10" and r.get("deadline_s"):
            value += f"; {_fmt(r['auto_wall_s'] / r['deadline_s'])}"
        if name == "intake" and r.get("load_hwm_mb") is not None:
            value += (
                f"; {_fmt(r['html_mb_per_cpu_s'])}; {_fmt(r['load_hwm_mb'])} "
                f"(a {_fmt(r['submission_mb'])} MB submission); Items 1A/7/8 in {r['Item 1A']}/{r['Item 7']}/"
                f"{r['Item 8']} of {r['ten_ks']} 10-Ks"
            )
        if name == "growth" and r.get("worst_pages_ratio") is not None:
            value += f"; {_fmt(r['worst_pages_ratio'])}"
        if name == "finalize" and r.get("runs"):
            value += "; " + ", ".join(
                f"{n} docs {_fmt(run['synthesizing_worker_peak_mb'])}" for n, run in r["runs"].items()
            )
        if name == "submit" and r.get("new"):
            value += f"; {_fmt(r['new']['first_extracted_s_worst'])}; {_fmt(r['new']['first_taken_s_worst'])}"
        if name == "submit-run" and r.get("new"):
            value += f"; {_fmt(r.get('wall_ratio'))}"
        if name.startswith("peer"):
            value += f"; peer text share {_fmt(r.get('text_share'))}, extracted {r.get('extracted')}"
        met = "" if r.get("met") is None else ("yes" if r["met"] else "no")
        lines.append(
            f"| {name} | {r.get('documents', '')} | {_fmt(r.get('wall_s'))} | {label} | {value} | "
            f"{_fmt(r.get('share_429'))} | {_fmt(r.get('lost'))} | {r.get('goal', '')} | {met} |"
        )
    return "\n".join(lines) + "\n"
