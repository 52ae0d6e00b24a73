"""A fake Slack Web API on 127.0.0.1 (``SLACK_API_URL``), and Slack's request signing.

``POST /api/{method}`` answers what the real slack_sdk and slack-bolt call (``auth.test``,
``chat.postMessage``, ``chat.update``, ``chat.postEphemeral``) and records every call. It
can answer the next N ``chat.postMessage`` calls with 429 and ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import threading
import time
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

TEAM = "T0CHATGATE"
BOT_USER = "UBOTCG01"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-1-test-token"


def signed_headers(
    body: str, *, secret: str = SIGNING_SECRET, at: float | None = None
) -> dict[str, str]:
    """The headers Slack sends with ``body``: timestamp and v0 HMAC-SHA256 signature."""
    timestamp = str(int(at if at is not None else time.time()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
    }


class FakeSlack:
    """The server; use as a context manager. ``calls`` holds (method, arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.rate_limit_next = 0
        # What auth.test reports in X-OAuth-Scopes.
        self.scopes = (
            "app_mentions:read,chat:write,commands,im:history,channels:history,groups:history,"
            "files:read"
        )
        # Socket Mode: envelopes to push to the connected client, and its acks.
        self.acks: list[dict[str, Any]] = []
        self._outbox: asyncio.Queue[dict[str, Any]] | None = None
        self.connections = 0
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def api_url(self) -> str:
        """The Web API base for ``SLACK_API_URL``."""
        return f"http://127.0.0.1:{self.port}/api/"

    def settings(self) -> dict[str, str]:
        """The chatgate settings pointing Slack at this server."""
        return {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.api_url,
        }

    def push(self, envelope: dict[str, Any]) -> None:
        """Send a Socket Mode envelope to the connected client."""
        outbox = self._outbox
        assert outbox is not None
        self._loop.call_soon_threadsafe(outbox.put_nowait, envelope)

    def wait_for_ack(self, envelope_id: str, *, timeout: float = 30) -> None:
        """Block until the client acknowledged this envelope."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(a.get("envelope_id") == envelope_id for a in list(self.acks)):
                return
            time.sleep(0.05)
        raise AssertionError(f"envelope {envelope_id} not acknowledged: {self.acks}")

    def posted(self, method: str = "chat.postMessage") -> list[dict[str, Any]]:
        """The arguments of every call of ``method``, in order."""
        with self._lock:
            return [args for name, args in self.calls if name == method]

    def wait_for(self, method: str, count: int, *, timeout: float = 30) -> list[dict[str, Any]]:
        """Block until ``count`` calls of ``method`` arrived; return them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.posted(method)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{count} {method} calls not seen in {timeout}s: {self.calls}")

    def __enter__(self) -> FakeSlack:
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
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/link", self._socket)
        self._outbox = asyncio.Queue()
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        await ws.send_json({"type": "hello", "num_connections": 1})
        outbox = self._outbox
        assert outbox is not None

        async def pump() -> None:
            while True:
                await ws.send_json(await outbox.get())

        pumping = asyncio.create_task(pump())
        try:
            async for message in ws:
                if message.type == web.WSMsgType.TEXT:
                    self.acks.append(json.loads(message.data))
        finally:
            pumping.cancel()
        return ws

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if method == "apps.connections.open":
            if request.headers.get("Authorization") != f"Bearer {APP_TOKEN}":
                return web.json_response({"ok": False, "error": "invalid_auth"})
            return web.json_response({"ok": True, "url": f"ws://127.0.0.1:{self.port}/link"})
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        raw = await request.text()
        if request.content_type == "application/json":
            arguments: dict[str, Any] = json.loads(raw or "{}")
        else:
            arguments = dict(parse_qsl(raw))
        if method == "chat.postMessage" and self.rate_limit_next > 0:
            self.rate_limit_next -= 1
            with self._lock:
                self.calls.append(("ratelimited", arguments))
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"}
            )
        with self._lock:
            self.calls.append((method, arguments))
        if method == "auth.test":
            return web.json_response(
                {"ok": True, "team_id": TEAM, "user_id": BOT_USER, "bot_id": "BCG01", "team": "t"},
                headers={"X-OAuth-Scopes": self.scopes},
            )
        if method in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
            ts = arguments.get("ts") or f"1700000000.{next(self._ts):06d}"
            return web.json_response(
                {"ok": True, "channel": arguments.get("channel"), "ts": ts, "message_ts": ts}
            )
        return web.json_response({"ok": False, "error": "unknown_method"})
