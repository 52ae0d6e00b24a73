"""The base of the fake platform servers: an aiohttp app on 127.0.0.1 (a free port) on its
own thread and event loop, so sync tests, async tests and gateways running as subprocesses
can all use it, and a record of the calls it answered."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Self

from aiohttp import web


class LoopbackServer:
    """Subclasses add their routes in :meth:`routes` and :meth:`record` each call; use the
    server as a context manager."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.times: list[float] = []  # when each call arrived (time.monotonic())
        self.port = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        # Files the platform holds, by URL path: their bytes (or a size, served as that
        # many zero bytes), and the bearer token a download must carry (None: any).
        self.hosted: dict[str, tuple[bytes | int, str | None]] = {}
        self.served: dict[str, int] = {}  # bytes sent of each hosted file, all told

    def host_file(self, path: str, data: bytes | int, *, token: str | None = None) -> str:
        """Serve ``data`` at ``path`` (a subclass routes its file paths to
        :meth:`_hosted`); its URL."""
        with self._lock:
            self.hosted[path] = (data, token)
        return f"http://127.0.0.1:{self.port}{path}"

    async def _hosted(self, request: web.Request) -> web.StreamResponse:
        """A hosted file, in 64 KiB chunks; a missing or wrong token is sent to a login
        page (as Slack does), an unknown path is 404."""
        self.record(
            "download", {"path": request.path, "auth": request.headers.get("Authorization")}
        )
        found = self.hosted.get(request.path)
        if found is None:
            return web.Response(status=404)
        data, token = found
        if token is not None and request.headers.get("Authorization") != f"Bearer {token}":
            return web.Response(status=302, headers={"Location": "/login"})
        size = data if isinstance(data, int) else len(data)
        response = web.StreamResponse(headers={"Content-Length": str(size)})
        await response.prepare(request)
        chunk = 64 * 1024
        for start in range(0, size, chunk):
            piece = (
                bytes(min(chunk, size - start))
                if isinstance(data, int)
                else data[start : start + chunk]
            )
            try:
                await response.write(piece)
            except ConnectionError:
                break
            with self._lock:
                self.served[request.path] = self.served.get(request.path, 0) + len(piece)
        return response

    def routes(self, app: web.Application) -> None:
        """Add the server's routes."""
        raise NotImplementedError

    async def started(self) -> None:
        """Runs on the server's loop once it listens."""

    async def stopping(self) -> None:
        """Runs on the server's loop before it stops listening."""

    def record(self, method: str, arguments: dict[str, Any]) -> None:
        """Remember a call (thread-safe)."""
        with self._lock:
            self.calls.append((method, arguments))
            self.times.append(time.monotonic())

    def called_at(self, method: str) -> list[tuple[float, dict[str, Any]]]:
        """When each call of ``method`` arrived, with its arguments, in order."""
        with self._lock:
            return [
                (at, args)
                for at, (name, args) in zip(self.times, self.calls, strict=True)
                if name == method
            ]

    def called(self, method: str) -> list[dict[str, Any]]:
        """The arguments of every call of ``method``, in order."""
        with self._lock:
            return [args for name, args in self.calls if name == method]

    def wait_for(self, method: str, count: int, *, timeout: float = 30) -> list[dict[str, Any]]:
        """Block until ``count`` calls of ``method`` arrived; return them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.called(method)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{count} {method} calls not seen in {timeout}s: {self.calls}")

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        await self.started()

    async def _stop(self) -> None:
        await self.stopping()
        if self._runner is not None:
            await self._runner.cleanup()
