"""Headless Chromium driven over the DevTools protocol (a websocket, with aiohttp's client).

Chromium is Debian's `chromium` package. `load` opens a page in a fresh tab and reports every
request the page made (`Network.requestWillBeSent`, which also fires for requests the page's
CSP then blocks), every console or security message (a CSP violation is logged there), and
what a probe script found in the finished page; `screenshot` captures the whole page. The
probe runs through `Runtime.evaluate`, which DevTools runs outside the page's CSP.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

START_TIMEOUT_S = 30.0
STEP_TIMEOUT_S = 20.0
SETTLE_MS = 500
"""After the load event: time for an `onerror` handler or a timer to run, had one got in."""


def chromium_or_skip() -> str:
    """The chromium binary; without one, a skip (a failure under CI=true, where .ci/run installs it)."""
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if found:
        return found
    message = "chromium is not installed (Debian: apt-get install chromium); .ci/run installs it"
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true: {message}")
    pytest.skip(message)


@dataclass
class Loaded:
    requests: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    probe: dict[str, Any] = field(default_factory=dict)
    png: bytes = b""


@contextmanager
def chromium(binary: str) -> Iterator[str]:
    """A headless Chromium with a private profile; yields its browser websocket URL."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-"))
    argv = [
        binary,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        "about:blank",
    ]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (port_file.exists() and len(port_file.read_text().split()) >= 2):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start (exit {process.poll()})")
            time.sleep(0.05)
        port, path = port_file.read_text().split()[:2]
        yield f"ws://127.0.0.1:{port}{path}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(profile, ignore_errors=True)


class _Session:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.last_id = 0
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self.last_id += 1
        message: dict[str, Any] = {"id": self.last_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        await self.ws.send_json(message)
        while True:
            reply = await self.ws.receive_json(timeout=STEP_TIMEOUT_S)
            if reply.get("id") != self.last_id:
                self.events.append(reply)
                continue
            if "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            result: dict[str, Any] = reply.get("result", {})
            return result

    async def until(self, method: str) -> None:
        while not any(e.get("method") == method for e in self.events):
            self.events.append(await self.ws.receive_json(timeout=STEP_TIMEOUT_S))


PROBE = """JSON.stringify({
  title: document.title,
  pwned: document.body.hasAttribute('data-pwned'),
  scripts: document.scripts.length,
  images: document.images.length,
  links: [...document.querySelectorAll('[href], [src], [srcset], [action]')].length,
  csp: (document.querySelector('meta[http-equiv="Content-Security-Policy"]') || {}).content || null,
  charts: [...document.querySelectorAll('figure.chart > svg')].map(s => {
    const box = s.getBoundingClientRect();
    return {id: s.id, width: box.width, height: box.height};
  }),
  text: document.body.innerText,
})"""


async def _load(ws_url: str, url: str, bypass_csp: bool, screenshot: bool) -> Loaded:
    async with aiohttp.ClientSession() as http, http.ws_connect(ws_url, max_msg_size=0) as ws:
        cdp = _Session(ws)
        target = (await cdp.call("Target.createTarget", url="about:blank"))["targetId"]
        tab = (await cdp.call("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        for domain in ("Network", "Page", "Runtime", "Log"):
            await cdp.call(f"{domain}.enable", tab)
        await cdp.call("Page.setBypassCSP", tab, enabled=bypass_csp)
        await cdp.call(
            "Emulation.setDeviceMetricsOverride",
            tab,
            width=1280,
            height=900,
            deviceScaleFactor=1,
            mobile=False,
        )
        cdp.events.clear()
        await cdp.call("Page.navigate", tab, url=url)
        await cdp.until("Page.loadEventFired")
        await cdp.call(
            "Runtime.evaluate",
            tab,
            expression=f"new Promise(r => setTimeout(r, {SETTLE_MS}))",
            awaitPromise=True,
        )
        probe = await cdp.call("Runtime.evaluate", tab, expression=PROBE, returnByValue=True)
        loaded = Loaded(probe=json.loads(probe["result"]["value"]))
        if screenshot:
            size = (await cdp.call("Page.getLayoutMetrics", tab))["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": 1280, "height": size["height"], "scale": 1}
            shot = await cdp.call(
                "Page.captureScreenshot", tab, format="png", clip=clip, captureBeyondViewport=True
            )
            loaded.png = base64.b64decode(shot["data"])
        for event in cdp.events:
            if event.get("method") == "Network.requestWillBeSent":
                loaded.requests.append(event["params"]["request"]["url"])
            elif event.get("method") == "Log.entryAdded":
                loaded.messages.append(event["params"]["entry"].get("text", ""))
            elif event.get("method") == "Runtime.consoleAPICalled":
                loaded.messages.append(json.dumps(event["params"].get("args")))
        await cdp.call("Target.closeTarget", targetId=target)
        return loaded


def load(ws_url: str, page: Path, *, bypass_csp: bool = False, screenshot: bool = False) -> Loaded:
    """Open `page` (a file) in a new tab and report what happened."""
    return load_url(ws_url, page.resolve().as_uri(), bypass_csp=bypass_csp, screenshot=screenshot)


def load_url(ws_url: str, url: str, *, bypass_csp: bool = False, screenshot: bool = False) -> Loaded:
    """Open `url` in a new tab and report what happened."""
    return asyncio.run(_load(ws_url, url, bypass_csp, screenshot))
