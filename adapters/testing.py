"""A fake chat adapter, shipped beside the port for tests (ours and other people's), the
way ``agent_core.testing`` ships a scripted model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from adapters.base import Check, EventSink, Hearing, Refuse, SenderLifecycle
from agent_core.events import ButtonPress, InboundMessage, Platform
from agent_core.files.fetching import FileUnavailable
from agent_core.records import Accepted, AttachmentRecord
from agent_core.testing import RecordingOutbound


class RecordingSender(RecordingOutbound):
    """A sender that records replies and edits, and whether it is open."""

    def __init__(self) -> None:
        super().__init__()
        self.open_count = 0
        self.closed = False

    async def open(self) -> None:
        """Count the opening."""
        self.open_count += 1

    async def fetch(self, file: AttachmentRecord, *, limit: int) -> AsyncIterator[bytes]:
        """No files here."""
        raise FileUnavailable("the recording sender holds no files")
        yield b""  # an async generator

    async def close(self) -> None:
        """Remember the closing."""
        self.closed = True


class FakeAdapter(SenderLifecycle[RecordingSender]):
    """An adapter for ``platform`` with no platform behind it: :meth:`deliver` hands an
    event to the gateway's sink as a real adapter would, and the sender records what the
    agent sends back."""

    def __init__(self, platform: Platform = "slack") -> None:
        self._platform: Platform = platform
        self.sender = RecordingSender()
        self.sink: EventSink | None = None
        self.running = asyncio.Event()
        self.stopped = False
        # What ready() answers: None when ready.
        self.not_ready: str | None = None
        self.hearing = Hearing()

    @property
    def platform(self) -> Platform:
        """The platform this fake poses as."""
        return self._platform

    def mount(self, router: web.UrlDispatcher, sink: EventSink) -> None:
        """Keep the sink: :meth:`deliver` uses it."""
        self.sink = sink

    async def run(self, sink: EventSink, stopping: asyncio.Event) -> None:
        """Stay connected until ``stopping`` (or until cancelled)."""
        self.running.set()
        try:
            await stopping.wait()
        finally:
            self.stopped = True

    def ready(self) -> str | None:
        """:attr:`not_ready`."""
        return self.not_ready

    async def check(self) -> Check:
        """Always fine."""
        return Check(self._platform, "ok", "a fake adapter")

    async def deliver(
        self,
        event: InboundMessage | ButtonPress,
        *,
        deadline: float | None = None,
        refuse: Refuse | None = None,
    ) -> Accepted | None:
        """Hand ``event`` to the gateway, as the platform's webhook or connection would."""
        assert self.sink is not None, "mount the adapter first (build_app does)"
        return await self.sink(event, deadline=deadline, refuse=refuse)
