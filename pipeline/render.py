"""Rendering the run report as Markdown and JSON (pure). Filing text is escaped."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_HTML = str.maketrans({"<": "&lt;", ">": "&gt;", "&": "&amp;"})
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)]*)\)")
_BARE_URL = re.compile(r"\b(https?|ftp)://", re.IGNORECASE)


def escape(text: str) -> str:
    """Text from a filing or a model, safe to put in Markdown: no HTML, images or links."""
    text = text.translate(_HTML)
    text = _MD_LINK.sub(lambda m: f"{m.group(1)} ({m.group(2)})", text)
    return _BARE_URL.sub(lambda m: f"{m.group(1)}[:]//", text)


def cell(value: object) -> str:
    text = "" if value is None else str(value)
    return escape(" ".join(text.split())).replace("|", "\\|")


@dataclass
class DocumentRow:
    path: str
    status: str
    error: str | None = None
    company: str | None = None
    fiscal_year: int | None = None
    revenue_usd: float | None = None
    risk_titles: list[str] = field(default_factory=list)


@dataclass
class ReportInput:
    run_id: str
    name: str | None
    query: str
    model: str
    simulated: bool
    answer: str
    synthesis_levels: int
    documents: list[DocumentRow]
    totals: dict[str, Any]
    failure: str | None = None


def money(value: float | None) -> str:
    if value is None:
        return ""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= size:
            return f"${value / size:,.1f}{unit}"
    return f"${value:,.0f}"


def markdown(r: ReportInput) -> str:
    counts = r.totals.get("documents", {})
    lines = [f"# Report: {cell(r.name or r.run_id)}", ""]
    if r.simulated:
        lines += ["> **SIMULATED RUN**: answers come from the built-in LLM simulator, not a model.", ""]
    if r.failure:
        lines += [f"> **RUN FAILED**: {cell(r.failure)}. The failures are listed below.", ""]
    lines += [
        f"**Question:** {cell(r.query)}",
        "",
        f"Run `{r.run_id}` · model `{cell(r.model)}` · "
        + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        + f" · {r.totals.get('llm_calls', 0)} LLM calls, {r.totals.get('tokens', 0):,} tokens",
        "",
        "## Answer",
        "",
        escape(r.answer),
        "",
    ]
    extracted = [d for d in r.documents if d.status == "extracted"]
    if extracted:
        lines += [
            "## Filings",
            "",
            "| Company | Fiscal year | Revenue | Top risk factors | File |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {cell(d.company)} | {cell(d.fiscal_year)} | {money(d.revenue_usd)} | "
            f"{cell('; '.join(d.risk_titles[:3]))} | {cell(d.path)} |"
            for d in extracted
        ]
        lines.append("")
    other = [d for d in r.documents if d.status != "extracted"]
    if other:
        lines += ["## Not extracted", "", "| File | Status | Reason |", "| --- | --- | --- |"]
        lines += [f"| {cell(d.path)} | {d.status} | {cell(d.error)} |" for d in other]
        lines.append("")
    return "\n".join(lines)


def as_json(r: ReportInput) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "name": r.name,
        "query": r.query,
        "model": r.model,
        "simulated": r.simulated,
        "answer": r.answer,
        "synthesis_levels": r.synthesis_levels,
        "failure": r.failure,
        "totals": r.totals,
        "documents": [d.__dict__ for d in r.documents],
    }
