"""Rendering the run report as Markdown and JSON (pure). Text from a filing or a model is
escaped with `escape`, the one Markdown escaper of the code base (the HTML page has its own
target language: `html_parts.text`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pipeline.reporting.trust_text import confidence_lines

_LINKIFY_TLDS = (
    "[a-z]{2}|xn--[\\w-]*|biz|com|edu|gov|net|org|pro|web|xxx|aero|asia|coop|info|museum|name|shop|рф"
)
"""What linkify (markdown-it's, VS Code's preview) takes as a domain's end in bare text: two
letters (a country code), an encoded zone, or one of its generic names."""
_ACTIVE = re.compile(
    r"[\\\[\]!<&@]"  # escapes, links, images, reference definitions, raw HTML, autolinks, entities, e-mail
    r"|/(?=/)"  # `//`: a scheme's (`https://`) or a protocol-relative URL's
    rf"|(?i:(?<=www)\.|\.(?=(?:{_LINKIFY_TLDS})(?![^\W_])))",  # `www.x`, `x.com`; not `10k.txt` or `$1.2`
)


def escape(text: str) -> str:
    """Text from a filing or a model, inert in Markdown: no link, image, reference definition,
    autolink, bare URL or e-mail address made a link, entity or raw HTML survives it (CommonMark,
    GFM, markdown-it with linkify). Each character that could start one is backslash-escaped, so
    the text still reads as written once rendered; emphasis, headings and lists stay (they load
    nothing).

    `[`, `]` and `!` make links, images and reference definitions (a definition anywhere in the
    document makes `![c][1]` anywhere an image); `<` raw HTML and autolinks; `&` entities; `@`,
    `//`, `www.` and the dot before a top-level domain the links GFM and linkify make of bare
    text; and `\\` itself, or the text could cancel an escape (`\\[` would leave `[` active).
    """
    return _ACTIVE.sub(lambda m: "\\" + m.group(0), text)


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
    revenue_grounded: bool | None = None
    """False: the revenue's quote is not in the filing, so the figure is not stated as fact."""
    risk_titles: list[str] = field(default_factory=list)
    """Risk factors whose quote was found in the filing."""
    unverified_risk_titles: list[str] = field(default_factory=list)
    """Risk factors whose quote was not found: kept out of the filings table."""
    quotes_total: int = 0
    quotes_grounded: int = 0
    injection_excerpt: str | None = None
    """Set when the filing holds instruction-like text aimed at a model."""
    confidence: float | None = None
    """The lowest confidence of its company, fiscal year and revenue (None: not scored)."""

    @property
    def grounding_rate(self) -> float | None:
        return round(self.quotes_grounded / self.quotes_total, 4) if self.quotes_total else None


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
    complete: bool = True
    """False: `documents` lists only those that need a look (failed or skipped, flagged), a bounded
    number of each; the table of every document is the run's documents CSV (`documents_csv`)."""


def documents_csv(run_id: str) -> str:
    """The file name of the run's table of every document, next to its report files."""
    return f"{run_id}-documents.csv"


def money(value: float | None) -> str:
    if value is None:
        return ""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= size:
            return f"${value / size:,.1f}{unit}"
    return f"${value:,.0f}"


def revenue_cell(d: DocumentRow) -> str:
    """The revenue as a fact only when its quote was found in the filing."""
    if d.revenue_usd is None:
        return ""
    if d.revenue_grounded is False:
        return f"unverified: {money(d.revenue_usd)}?"
    return money(d.revenue_usd)


def confidence_cell(value: float | None) -> str:
    """A document's lowest field confidence, for the filings tables ('' when not scored)."""
    return "" if value is None else f"{value:.2f}"


def _grounding_line(totals: dict[str, Any]) -> str:
    grounding = totals.get("grounding") or {}
    total, grounded = grounding.get("quotes_total", 0), grounding.get("quotes_grounded", 0)
    if not total:
        return "No quotes to check."
    return (
        f"Quotes found in their filing: {grounded} of {total} ({grounded / total:.1%}). Risk factors "
        "whose quote is not in the filing are left out of the table below, and a revenue whose quote "
        "is not in the filing is marked unverified."
    )


def late_calls_note(copies: int) -> str:
    """Said after the totals when hedged synthesis copies were still running as the report was
    written: their calls come after these totals (the report is rewritten once they end)."""
    if not copies:
        return ""
    which = "copy was" if copies == 1 else "copies were"
    whose = "its" if copies == 1 else "their"
    return (
        f" · {copies} synthesis {which} still running when this report was written: {whose} calls "
        "are recorded after these totals (`pipeline status` counts them)"
    )


def cached_note(cached_tokens: int) -> str:
    """Said after the tokens: how many prompt tokens the provider served from its prompt cache
    (priced at the cached-input price); nothing when none was."""
    return f" ({cached_tokens:,} of them cached)" if cached_tokens else ""


def _cost_text(totals: dict[str, Any]) -> str:
    """The run's recorded cost, and what batch mode saved, when known."""
    cost = totals.get("cost_usd")
    batch = totals.get("batch") or {}
    text = f" · ${cost:.4f}" if isinstance(cost, (int, float)) else ""
    if batch.get("answers"):
        text += (
            f" · batch and flex: {batch['answers']} answers at batch prices (${batch.get('cost_usd', 0):.4f}), "
            f"${batch.get('saved_usd', 0):.4f} saved against sync prices"
        )
    return text + _tiers_text(totals.get("tiers")) + _estimate_text(totals.get("estimate"))


def _tiers_text(tiers: dict[str, int] | None) -> str:
    """Documents per tier that answered them, where more than one tier did (`--mode auto`)."""
    if not tiers or len(tiers) < 2:
        return ""
    from pipeline.runs.tiers import tiers_line

    return " · documents by tier: " + tiers_line(tiers)


def _estimate_text(estimate: dict[str, Any] | None) -> str:
    """The estimate at submit of tokens and cost, and how far the run's figures are from it."""
    if not estimate:
        return ""
    parts = []
    shown_as = (
        ("tokens", "{:,.0f} tokens"),
        ("cached_tokens", "{:,.0f} of them cached"),
        ("cost_usd", "${:.4f}"),
    )
    for name, shown in shown_as:
        pair = estimate.get(name) or {}
        if pair.get("estimate") is None:
            continue
        error = pair.get("error")
        parts.append(shown.format(pair["estimate"]) + (f" ({error:+.0%} off)" if error is not None else ""))
    return " · estimated at submit: " + ", ".join(parts) if parts else ""


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
        + f" · {r.totals.get('llm_calls', 0)} LLM calls, {r.totals.get('tokens', 0):,} tokens"
        + cached_note(int(r.totals.get("cached_tokens") or 0))
        + _cost_text(r.totals)
        + late_calls_note(int(r.totals.get("synthesis_copies_running") or 0)),
        "",
        "## Answer",
        "",
        escape(r.answer),
        "",
    ]
    lines += _filings(r)
    trust = confidence_lines(r.totals.get("confidence"))
    if trust:
        lines += ["## Confidence", "", *(escape(line) + "\n" for line in trust)]
    flagged = [d for d in r.documents if d.injection_excerpt]
    if flagged:
        lines += [
            "## Injection warnings",
            "",
            "These filings hold text that addresses a language model. It was treated as data, "
            "never obeyed; their facts above are as reliable as their quotes.",
            "",
            "| File | Excerpt |",
            "| --- | --- |",
        ]
        lines += [f"| {cell(d.path)} | {cell(d.injection_excerpt)} |" for d in flagged]
        lines += ["", *_more(r, int(r.totals.get("injection_flagged") or 0) - len(flagged), "flagged")]
    other = [d for d in r.documents if d.status != "extracted"]
    if other:
        lines += ["## Not extracted", "", "| File | Status | Reason |", "| --- | --- | --- |"]
        lines += [f"| {cell(d.path)} | {d.status} | {cell(d.error)} |" for d in other]
        not_extracted = sum(n for status, n in counts.items() if status != "extracted")
        lines += ["", *_more(r, not_extracted - len(other), "failed or skipped")]
    return "\n".join(lines)


def _filings(r: ReportInput) -> list[str]:
    """The filings table, or, for a run past the report's listing, where its table is."""
    extracted = [d for d in r.documents if d.status == "extracted"]
    if not r.complete:
        name = documents_csv(r.run_id)
        total = sum(r.totals.get("documents", {}).values())
        return [
            "## Filings",
            "",
            _grounding_line(r.totals),
            "",
            f"The table of the run's {total:,} documents is a file of its own: [{name}]({name}), next to "
            f"this report (`pipeline run` writes it; `pipeline report {r.run_id} --format csv` writes it "
            "for any run). The database holds the same rows: `extractions` and `risk_factors` by "
            "`run_id` (docs/querying.md).",
            "",
        ]
    if not extracted:
        return []
    lines = [
        "## Filings",
        "",
        _grounding_line(r.totals),
        "",
        "| Company | Fiscal year | Revenue | Top risk factors | Quotes found | Confidence | File |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {cell(d.company)} | {cell(d.fiscal_year)} | {revenue_cell(d)} | "
        f"{cell('; '.join(d.risk_titles[:3]))} | {d.quotes_grounded}/{d.quotes_total} | "
        f"{confidence_cell(d.confidence)} | "
        f"{cell(d.path)}{' (injection warning)' if d.injection_excerpt else ''} |"
        for d in extracted
    ]
    return [*lines, ""]


def _more(r: ReportInput, more: int, what: str) -> list[str]:
    """The line under a list the report cut: how many more, and where they are."""
    if r.complete or more <= 0:
        return []
    return [f"{more:,} more {what}: in {documents_csv(r.run_id)}.", ""]


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
        "documents_complete": r.complete,
        "documents": [{**d.__dict__, "grounding_rate": d.grounding_rate} for d in r.documents],
    }
