"""The web chat as an adapter: its sender wakes this process's streams; messages come in
through the gateway's own API (``gateway.web.api``), so there is nothing to mount or run."""

from __future__ import annotations

import asyncio

from aiohttp import web

from adapters.base import Check, EventSink, Hearing, SenderLifecycle
from adapters.web.auth import is_loopback
from adapters.web.send import WebHub, WebSender
from adapters.web.uploads import Uploads
from agent_core.events import Platform
from agent_core.files.bucket import BucketBlobs, store_for
from agent_core.settings import Settings


class WebAdapter(SenderLifecycle[WebSender]):
    """Always there: the web chat needs no account anywhere."""

    platform: Platform = "web"

    def __init__(self, settings: Settings, hub: WebHub | None = None) -> None:
        self.hub = hub or WebHub()
        files = store_for(settings)
        bucket = files if isinstance(files, BucketBlobs) else None
        self.uploads = Uploads(settings.state_dir.resolve(), bucket)
        self.sender = WebSender(self.hub, self.uploads, files)
        self._settings = settings
        self.hearing = Hearing()  # no connection: the gateway's own HTTP server

    def mount(self, router: web.UrlDispatcher, sink: EventSink) -> None:
        """Nothing: ``gateway.web.api`` serves the page and its API."""

    async def run(self, sink: EventSink, stopping: asyncio.Event) -> None:
        """Nothing: no connection to hold."""

    def ready(self) -> str | None:
        """Always ready."""
        return None

    async def check(self) -> Check:
        """Who can reach the web chat with these settings."""
        settings = self._settings
        if settings.web_token is not None:
            return Check("web", "ok", "web chat needs the token (CHATGATE_WEB_TOKEN)")
        if is_loopback(settings.host) or settings.host == "localhost":
            return Check("web", "ok", f"web chat on http://{settings.host}:{settings.port}/")
        return Check(
            "web",
            "WARN",
            f"listening on {settings.host} without CHATGATE_WEB_TOKEN: the web chat "
            "refuses every client that is not on loopback",
            "set CHATGATE_WEB_TOKEN to use the web chat from other machines",
        )
