"""The run's report as one self-contained HTML page (pure): charts as inline SVG, no script,
no external resource, and a Content-Security-Policy that forbids loading anything at all.

Every string from a filing or a model goes through `html_parts.text` (or matplotlib's XML
escaping inside a chart); the page has no link, and no attribute holds data.
"""

from __future__ import annotations

import posixpath
from dataclasses import replace
from typing import Any

from pipeline.reporting import chart_rules, render
from pipeline.reporting.chart_rules import extracted, show
from pipeline.reporting.html_parts import Html, custom_cell, join, note, section, table, tag, text
from pipeline.reporting.html_parts import ungrounded_paths as unverified_paths
from pipeline.reporting.page_data import PageInput
from pipeline.reporting.render import cached_note, confidence_cell, late_calls_note, money
from pipeline.reporting.run_charts import calls_section
from pipeline.reporting.trust_text import confidence_lines
from pipeline.runs.failures import group_failures

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
"""Sent as the page's first `<meta http-equiv>`: nothing may load (the charts are inline SVG, the
fonts the system's), only the page's own `<style>` and style attributes apply, and neither a
`<base>` nor a form could point anywhere."""
STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0 auto;
max-width:70rem;padding:1rem 1.5rem 3rem;color:#1d232a;line-height:1.45}
h1{font-size:1.6rem;margin:.4rem 0}h2{font-size:1.2rem;border-bottom:1px solid #d6dbe0;padding-bottom:.2rem;margin-top:2rem}
.banner{padding:.5rem .8rem;border-radius:4px;font-weight:600;margin:.5rem 0}
.simulated{background:#fff4d6;border:1px solid #e0b44c}.failed{background:#fde2df;border:1px solid #c0392b}
.meta{color:#56616c}.note{color:#56616c;font-size:.9rem}.answer{white-space:pre-wrap;background:#f6f8fa;
padding:.8rem 1rem;border-radius:4px}table{border-collapse:collapse;width:100%;font-size:.88rem;margin:.6rem 0}
th,td{border-bottom:1px solid #e3e7eb;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f3f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
.unverified{color:#a5401f}.warn{color:#a5401f;font-weight:600}td{overflow-wrap:break-word}
figure.chart{margin:1rem 0}figure.chart svg{width:100%;max-width:56rem;height:auto;display:block}
figcaption{color:#56616c;font-size:.85rem}code{white-space:pre-wrap;overflow-wrap:anywhere}
ul.reasons{margin:.3rem 0 .8rem;font-weight:600}
"""


def render_page(page: PageInput) -> str:
    """The whole page for one run; a failed run's failures come first, under its banner."""
    page, base = relative_paths(page)
    r = page.report
    title = r.get("name") or r["run_id"]
    failures = _not_extracted(r)
    failed = bool(r.get("failure")) or page.status == "failed"
    body = join(
        [
            _header(page, base),
            failures if failed else "",
            section(
                "answer",
                "Question and answer",
                tag("p", r.get("query")),
                tag("div", r.get("answer"), "answer"),
            ),
            _filings(page),
            _revenue(r),
            _risks(r),
            _grounding(r),
            _confidence(r),
            "" if failed else failures,
            calls_section(page),
        ]
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text('Report: ' + str(title))}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def relative_paths(page: PageInput) -> tuple[PageInput, str | None]:
    """The page with its documents' paths relative to the directory they all lie under (a
    batch's files mostly share one), and that directory; the page as it is when none."""
    paths = [str(d.get("path") or "") for d in page.report.get("documents", [])]
    if len(paths) < 2 or not all(p.startswith("/") for p in paths):
        return page, None
    base = posixpath.commonpath([posixpath.dirname(p) for p in paths])
    if base in ("", "/"):
        return page, None

    def cut(path: str) -> str:
        return path[len(base) + 1 :] if path.startswith(base + "/") else path

    documents = [{**d, "path": cut(str(d.get("path") or ""))} for d in page.report["documents"]]
    custom = page.custom and replace(page.custom, rows=[(cut(p), data) for p, data in page.custom.rows])
    slowest = [replace(d, path=cut(d.path)) for d in page.slowest]
    return replace(page, report={**page.report, "documents": documents}, custom=custom, slowest=slowest), base


def _header(page: PageInput, base: str | None) -> Html:
    r = page.report
    parts = [tag("h1", f"Report: {r.get('name') or r['run_id']}")]
    if r.get("simulated"):
        parts.append(
            tag(
                "p",
                "SIMULATED RUN: answers come from the built-in LLM simulator, not a model.",
                "banner simulated",
            )
        )
    if r.get("failure"):
        parts.append(tag("p", f"RUN FAILED: {r['failure']}. The failures are listed below.", "banner failed"))
    totals = r.get("totals") or {}
    counts = ", ".join(f"{n} {status}" for status, n in sorted((totals.get("documents") or {}).items()))
    finished = page.finished_at.isoformat(timespec="seconds") if page.finished_at else "not finished"
    line = (
        f"Run {r['run_id']} · {page.status} · model {r.get('model')} · {counts} · {_calls_text(page)} · "
        f"submitted {page.created_at.isoformat(timespec='seconds')}, finished {finished}"
    )
    if page.custom:
        line += f" · schema {page.custom.schema}"
    if base:
        line += f" · files under {base}/"
    parts.append(tag("p", line, "meta"))
    return Html(f"<header>{join(parts)}</header>")


def _calls_text(page: PageInput) -> str:
    """The run's calls and tokens as `pipeline status` counts them when the page is made, and
    how many of them the stored report (written before them) leaves out."""
    stored = page.report.get("totals") or {}
    if page.totals is None:
        return (
            f"{stored.get('llm_calls', 0)} LLM calls, {stored.get('tokens', 0):,} tokens"
            + cached_note(int(stored.get("cached_tokens") or 0))
            + late_calls_note(int(stored.get("synthesis_copies_running") or 0))
        )
    text = f"{page.totals.calls} LLM calls, {page.totals.tokens:,} tokens" + cached_note(
        page.totals.cached_tokens
    )
    late = page.totals.calls - int(stored.get("llm_calls") or 0)
    if late > 0:
        return text + f" ({late} recorded after the report was written)"
    return text + late_calls_note(int(stored.get("synthesis_copies_running") or 0))


def _file(d: dict[str, Any]) -> Html:
    name = text(d.get("path"))
    return Html(name + (tag("span", " (injection warning)", "warn") if d.get("injection_excerpt") else ""))


def _revenue_cell(d: dict[str, Any]) -> Html:
    if d.get("revenue_usd") is None:
        return Html("")
    if d.get("revenue_grounded") is False:
        return tag("span", f"unverified: {money(d['revenue_usd'])}?", "unverified")
    return text(money(d["revenue_usd"]))


def _filings(page: PageInput) -> Html:
    r = page.report
    grounding = (r.get("totals") or {}).get("grounding") or {}
    total, found = grounding.get("quotes_total", 0), grounding.get("quotes_grounded", 0)
    intro = note(
        f"Quotes found in their filing: {found} of {total} ({found / total:.1%}). Risk factors whose quote "
        "is not in the filing are left out of this table, and a revenue whose quote is not in the filing "
        "is marked unverified."
        if total
        else "No quotes to check."
    )
    if page.custom is not None:
        custom = page.custom
        by_path = {d.get("path"): d for d in r.get("documents", [])}
        rows = []
        for path, data in custom.rows:
            bad = unverified_paths(data, "_grounding")
            d = by_path.get(path, {"path": path})
            cells = [custom_cell(data.get(f), f, bad) for f in custom.fields]
            rows.append([_file(d), *cells, f"{d.get('quotes_grounded', 0)}/{d.get('quotes_total', 0)}"])
        headers = ["File", *custom.fields, "Quotes found"]
        rest = page.custom_total - len(custom.rows)
        more = (
            note(
                f"The first {len(custom.rows):,} of {page.custom_total:,} filings by path; {rest:,} more: "
                f"every document is in {render.documents_csv(str(r['run_id']))} (`pipeline report "
                f"{r['run_id']} --format csv`), and each answer in the database (extractions.data by run_id)."
            )
            if rest > 0
            else ""
        )
        return section("filings", f"Filings ({custom.schema})", intro, table(headers, rows), more)
    if r.get("documents_complete") is False:
        return section("filings", "Filings", intro, note(_table_elsewhere(r)))
    done = extracted(r)
    if not done:
        return section("filings", "Filings", note("No filing was extracted."))
    rows = [
        [
            d.get("company") or "",
            str(d.get("fiscal_year") or ""),
            _revenue_cell(d),
            "; ".join((d.get("risk_titles") or [])[:3]),
            f"{d.get('quotes_grounded', 0)}/{d.get('quotes_total', 0)}",
            confidence_cell(d.get("confidence")),
            _file(d),
        ]
        for d in done
    ]
    headers = ["Company", "Fiscal year", "Revenue", "Top risk factors", "Quotes found", "Confidence", "File"]
    return section("filings", "Filings", intro, table(headers, rows))


def _table_elsewhere(r: dict[str, Any]) -> str:
    """Where the table of a run past the report's listing is (its charts of filings with it)."""
    total = sum(((r.get("totals") or {}).get("documents") or {}).values())
    name = render.documents_csv(str(r["run_id"]))
    return (
        f"The table of the run's {total:,} documents is a file of its own, {name}, next to this page "
        f"(`pipeline report {r['run_id']} --format csv` writes it), and so are the charts of filings: "
        "revenue by company, risk factors and quotes found per filing. The database holds the same "
        "rows (extractions and risk_factors by run_id)."
    )


def _more(r: dict[str, Any], listed: int, total: int, what: str) -> Html:
    """The note under a list the report cut: how many more, and where."""
    if r.get("documents_complete") is not False or total <= listed:
        return Html("")
    return note(f"{total - listed:,} more {what}: in {render.documents_csv(str(r['run_id']))}.")


def _revenue(r: dict[str, Any]) -> Html:
    choice = chart_rules.revenue(r)
    return section("revenue", "Revenue by company", show(choice)) if choice else Html("")


def _risks(r: dict[str, Any]) -> Html:
    choice = chart_rules.risks(r)
    return section("risks", "Top risk factors across the run", show(choice)) if choice else Html("")


def _confidence(r: dict[str, Any]) -> Html:
    lines = confidence_lines((r.get("totals") or {}).get("confidence"))
    if not lines:
        return Html("")
    intro = note(
        "Each field's confidence comes from how its quote was found, whether its quote states it, "
        "agreement across chunks and second answers (docs/extraction.md, Confidence). The Confidence "
        "column above is a filing's lowest; `pipeline review export` lists the fields to check first."
    )
    return section("confidence", "Confidence", intro, *(tag("p", line) for line in lines))


def _grounding(r: dict[str, Any]) -> Html:
    parts = [show(chart_rules.grounding(r))]
    flagged = [d for d in r.get("documents", []) if d.get("injection_excerpt")]
    if flagged:
        parts.append(tag("h3", "Injection warnings"))
        parts.append(
            note(
                "These filings hold text that addresses a language model. It was treated as data, never obeyed; their facts above are as reliable as their quotes."
            )
        )
        parts.append(
            table(
                ["File", "Excerpt"], [[d.get("path"), tag("code", d["injection_excerpt"])] for d in flagged]
            )
        )
        flagged_total = int((r.get("totals") or {}).get("injection_flagged") or 0)
        parts.append(_more(r, len(flagged), flagged_total, "flagged"))
    else:
        parts.append(note("No filing holds text that addresses a language model."))
    return section("grounding", "Grounding and injection warnings", *parts)


def _not_extracted(r: dict[str, Any]) -> Html:
    other = [d for d in r.get("documents", []) if d.get("status") != "extracted"]
    if not other:
        return section("not-extracted", "Failed and skipped documents", note("Every document was extracted."))
    groups = group_failures([(str(d.get("status")), str(d.get("path")), d.get("error")) for d in other])
    reasons = tag("ul", join(tag("li", f"{g.documents:,} {g.status}: {g.reason}") for g in groups), "reasons")
    rows = [[d.get("path"), d.get("status"), d.get("error") or ""] for d in other]
    counts = (r.get("totals") or {}).get("documents") or {}
    if r.get("documents_complete") is False:  # the listed ones: their reasons, and how many more
        not_extracted = sum(n for status, n in counts.items() if status != "extracted")
        intro = f"{not_extracted:,} of {sum(counts.values()):,} documents not extracted; the first {len(other):,}, by reason:"
    else:
        intro = f"{len(other):,} of {len(r.get('documents', [])):,} documents not extracted, by reason:"
        not_extracted = len(other)
    return section(
        "not-extracted",
        "Failed and skipped documents",
        note(intro),
        reasons,
        table(["File", "Status", "Reason"], rows),
        _more(r, len(other), not_extracted, "failed or skipped"),
    )
