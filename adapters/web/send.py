"""Delivery to the web chat: the database *is* the medium. A reply is delivered once its
message row exists (the turn journals it before sending), so :class:`WebSender` only wakes
the browsers watching the conversation; browsers also poll, so a reply written by another
gateway process still arrives."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from agent_core.delivery import ChunkSent
from agent_core.events import ApprovalPrompt, ConversationKey, Edit, Reply


class WebHub:
    """Wakes the streams watching a conversation when something new is stored in it."""

    def __init__(self) -> None:
        self._waiters: defaultdict[ConversationKey, set[asyncio.Event]] = defaultdict(set)

    def publish(self, conversation: ConversationKey) -> None:
        """Wake every stream of this conversation."""
        for waiter in self._waiters.get(conversation, ()):
            waiter.set()

    async def wait(self, conversation: ConversationKey, *, within: float) -> None:
        """Return when the conversation changes, or after ``within`` seconds."""
        waiter = asyncio.Event()
        self._waiters[conversation].add(waiter)
        try:
            async with asyncio.timeout(within):
                await waiter.wait()
        except TimeoutError:
            pass
        finally:
            self._waiters[conversation].discard(waiter)
            if not self._waiters[conversation]:
                del self._waiters[conversation]


class WebSender:
    """Delivers web replies: the row is already stored, so wake the conversation's streams."""

    def __init__(self, hub: WebHub) -> None:
        self._hub = hub

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        """Publish the reply to the streams; the receipt is the reply's delivery key."""
        self._hub.publish(reply.conversation)
        return f"web:{reply.idempotency_key}"

    async def edit(self, edit: Edit) -> None:
        """The decision is already stored beside the prompt: wake the streams."""
        self._hub.publish(edit.message.conversation)

    async def open(self) -> None:
        """Nothing to open."""

    async def close(self) -> None:
        """Nothing to close."""
