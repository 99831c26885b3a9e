"""A reviewer at the review sheet, in headless Chromium (over the DevTools protocol, as
tests/browser.py drives it): types a name and values with real key input, clicks boxes and the
Save button with the mouse, and waits for the browser to write the download.

What the page asked the network for is reported (`Network.requestWillBeSent` fires even for a
request the CSP then blocks), with the console and security messages (a CSP violation, a
script refused for a wrong hash).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.browser import STEP_TIMEOUT_S, _Session

POLL_S = 0.05


@dataclass
class Review:
    """What the reviewer does: a name, values typed over the shown ones (by key), rows marked
    "no value", rows only ticked reviewed (confirmed)."""

    reviewer: str
    values: dict[str, str] = field(default_factory=dict)
    no_value: list[str] = field(default_factory=list)
    confirm: list[str] = field(default_factory=list)


@dataclass
class Saved:
    download: Path
    requests: list[str]
    messages: list[str]
    status: str
    """The sheet's status line after Save."""


async def _evaluate(cdp: _Session, tab: str, expression: str) -> Any:
    found = await cdp.call("Runtime.evaluate", tab, expression=expression, returnByValue=True)
    if "exceptionDetails" in found:
        raise RuntimeError(f"{expression}: {found['exceptionDetails']}")
    return found["result"].get("value")


async def _type(cdp: _Session, tab: str, selector: str, typed: str) -> None:
    """Focus the input, select what it holds, and type over it (input events, as from keys)."""
    await _evaluate(
        cdp, tab, f"(e => {{ e.focus(); e.select(); }})(document.querySelector({json.dumps(selector)}))"
    )
    await cdp.call("Input.insertText", tab, text=typed)


async def _click(cdp: _Session, tab: str, selector: str) -> None:
    """A left click with the mouse in the middle of the element, scrolled into view."""
    where = await _evaluate(
        cdp,
        tab,
        f"""(e => {{ e.scrollIntoView({{block: "center"}}); const r = e.getBoundingClientRect();
            return {{x: r.x + r.width / 2, y: r.y + r.height / 2}}; }})(document.querySelector({json.dumps(selector)}))""",
    )
    for kind in ("mousePressed", "mouseReleased"):
        await cdp.call(
            "Input.dispatchMouseEvent",
            tab,
            type=kind,
            x=where["x"],
            y=where["y"],
            button="left",
            clickCount=1,
        )


async def _save(ws_url: str, page: Path, downloads: Path, name: str, review: Review) -> Saved:
    async with aiohttp.ClientSession() as http, http.ws_connect(ws_url, max_msg_size=0) as ws:
        cdp = _Session(ws)
        await cdp.call("Browser.setDownloadBehavior", behavior="allow", downloadPath=str(downloads))
        target = (await cdp.call("Target.createTarget", url="about:blank"))["targetId"]
        tab = (await cdp.call("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        for domain in ("Network", "Page", "Runtime", "Log"):
            await cdp.call(f"{domain}.enable", tab)
        cdp.events.clear()
        await cdp.call("Page.navigate", tab, url=page.resolve().as_uri())
        await cdp.until("Page.loadEventFired")
        await _type(cdp, tab, "#reviewer", review.reviewer)
        for key, typed in review.values.items():
            await _type(cdp, tab, f'tr[data-key="{key}"] input.value', typed)
        for key in review.no_value:
            await _click(cdp, tab, f'tr[data-key="{key}"] input.novalue')
        for key in review.confirm:
            await _click(cdp, tab, f'tr[data-key="{key}"] input.reviewed')
        await _click(cdp, tab, "#save")
        download = downloads / name
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not download.exists():  # Chromium writes elsewhere, then renames it when complete
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no {name} in {downloads} within {STEP_TIMEOUT_S} s: {sorted(downloads.iterdir())}"
                )
            await asyncio.sleep(POLL_S)
        status = await _evaluate(cdp, tab, "document.getElementById('status').textContent")
        await cdp.call("Target.closeTarget", targetId=target)
    requests = [
        e["params"]["request"]["url"] for e in cdp.events if e.get("method") == "Network.requestWillBeSent"
    ]
    messages = [
        e["params"]["entry"].get("text", "")
        if e["method"] == "Log.entryAdded"
        else json.dumps(e["params"]["args"])
        for e in cdp.events
        if e.get("method") in ("Log.entryAdded", "Runtime.consoleAPICalled")
    ]
    return Saved(download, requests, messages, str(status))


def save_review(ws_url: str, page: Path, downloads: Path, name: str, review: Review) -> Saved:
    """Open the sheet `page`, do `review`, click Save, and wait for `downloads / name`."""
    return asyncio.run(_save(ws_url, page, downloads, name, review))
