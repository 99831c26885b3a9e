"""Running the simulator: `serve()` in the foreground, `SimServer` on a background thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import threading
from types import TracebackType
from typing import Any

from aiohttp import web

from pipeline_dev.sim.config import SimConfig
from pipeline_dev.sim.server import build_app
from pipeline_dev.sim.state import STATE

BACKLOG = 2048  # hundreds of clients may connect at once
SHUTDOWN_TIMEOUT_S = 5.0
DEFAULT_CONFIG = SimConfig()  # frozen, so one shared default is safe


async def start(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve `app` on host:port (0 picks a free port); returns the runner and the bound port."""
    # handler_cancellation: a client that hangs up cancels its handler (hung requests included).
    runner = web.AppRunner(
        app, access_log=None, handler_cancellation=True, shutdown_timeout=SHUTDOWN_TIMEOUT_S
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=BACKLOG)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    return runner, int(bound)


def serve(host: str, port: int, config: SimConfig) -> None:
    """Serve until SIGINT/SIGTERM. Prints exactly one line, `pipeline-sim listening on
    http://HOST:PORT/v1`, to stdout (flushed) once the port is bound."""

    async def main() -> None:
        runner, bound = await start(build_app(config), host, port)
        print(f"pipeline-sim listening on http://{host}:{bound}/v1", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


class SimServer:
    """The simulator on 127.0.0.1 (a free port) in a background thread, for tests.

    `with SimServer(SimConfig(seed=1)) as sim: OpenAI(base_url=sim.base_url, ...)`
    """

    def __init__(self, config: SimConfig = DEFAULT_CONFIG) -> None:
        self.config = config
        self.base_url = ""
        self.port = 0
        self._app: web.Application | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started: concurrent.futures.Future[int] = concurrent.futures.Future()

    def __enter__(self) -> SimServer:
        self._thread = threading.Thread(target=self._run, name="pipeline-sim", daemon=True)
        self._thread.start()
        self.port = self._started.result(timeout=30)  # re-raises a failed start
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=SHUTDOWN_TIMEOUT_S + 10)

    def stats(self) -> dict[str, Any]:
        """The same counters as GET /sim/stats."""
        result: dict[str, Any] = self._call(lambda app: app[STATE].stats())
        return result

    def reset(self) -> None:
        """The same as POST /sim/reset."""
        self._call(lambda app: app[STATE].reset())

    def _call(self, fn: Any) -> Any:
        if self._loop is None or self._app is None:
            raise RuntimeError("SimServer is not running; use it as a context manager")
        app = self._app

        async def run() -> Any:
            return fn(app)

        # The state belongs to the server's loop: read it there, not from this thread.
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # surface a failed start to __enter__
            if not self._started.done():
                self._started.set_exception(exc)
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._app = build_app(self.config)
        runner, port = await start(self._app, "127.0.0.1", 0)
        self._started.set_result(port)
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()
