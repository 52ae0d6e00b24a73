"""The outbound port: deliver a reply to its platform and return the platform's receipt."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from agent_core.errors import DeliveryError
from agent_core.events import (
    ApprovalPrompt,
    ConversationKey,
    Edit,
    OutgoingFile,
    Platform,
    Reply,
)
from agent_core.live_reply import LiveReply
from agent_core.records import TurnState

ChunkSent = Callable[[int, str], Awaitable[None]]
"""Told each chunk of a long reply as the platform accepts it: (index, message id)."""


class Outbound(Protocol):
    """Something that can put replies and approval prompts in front of people."""

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        """Deliver ``reply`` and return the platform's message id (the receipt).

        ``reply.idempotency_key`` is stable across resends of the same reply; platforms
        that can dedupe on it (a nonce, a stored key) must, so a resend after a crash does
        not show the reply twice. A platform that cannot (Telegram) reports each chunk of
        a long reply to ``progress`` as it goes, to be journaled, and on a resend skips
        the chunks in ``reply.delivered``. Raise ``DeliveryError`` when it cannot be
        delivered.
        """
        ...

    async def send_file(self, file: OutgoingFile) -> str:
        """Deliver a file to its conversation (its thread), the caption with it; the
        receipt is the message that carries it. With ``resend``, a platform that can look
        for its earlier delivery does, and returns that one's receipt."""
        ...

    async def edit(self, edit: Edit) -> None:
        """Change a message we sent (an approval prompt once decided)."""
        ...

    async def mark(
        self,
        conversation: ConversationKey,
        message_id: str,
        state: TurnState,
        *,
        previous: TurnState | None,
    ) -> None:
        """Show ``state`` on the message that opened a turn (a reaction, replacing the one
        for ``previous``), and a typing indicator while ``working`` where the platform has
        one (called again every few seconds while the turn works); nothing where the
        platform has neither. May raise: the turn goes on regardless."""
        ...

    async def session(
        self, conversation: ConversationKey, state: TurnState, *, title: str, user: str
    ) -> None:
        """Show what the agent is doing in the conversation's own session status, where
        the platform has one (Slack's agent sessions: working, waiting, done, with its
        Stop button while working); ``title`` names the session when it is new, ``user``
        started it. Nothing elsewhere. May raise: the turn goes on regardless."""
        ...

    async def direct(self, user: str, *, workspace: str) -> ConversationKey | None:
        """The direct-message chat with ``user`` (chatgate's name, ``slack:U0123``) in
        ``workspace``, opened if need be, where an approval prompt reaches them alone; None
        where the platform has none, or ``user`` is not one of its people. Raise
        ``DeliveryError`` when it refuses."""
        ...

    def live(
        self,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
        user: str,
    ) -> LiveReply | None:
        """Where the reply of the turn ``key`` may be shown while it is written, or None
        where this platform does not show replies as they grow. ``message`` is the one an
        earlier attempt at the turn showed it in (journaled): the live reply goes on in
        it instead of posting another; ``reply_to`` is the message the reply answers, and
        ``user`` the person it is for."""
        ...


class OutboundRouter:
    """Routes each reply to the sender registered for its conversation's platform."""

    def __init__(self, senders: Mapping[Platform, Outbound]) -> None:
        self._senders = dict(senders)

    def _sender(self, platform: Platform) -> Outbound:
        sender = self._senders.get(platform)
        if sender is None:
            raise DeliveryError(f"no sender configured for {platform}")
        return sender

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        """Deliver through the platform's sender."""
        return await self._sender(reply.conversation.platform).send(reply, progress=progress)

    async def send_file(self, file: OutgoingFile) -> str:
        """Deliver through the platform's sender."""
        return await self._sender(file.conversation.platform).send_file(file)

    async def edit(self, edit: Edit) -> None:
        """Edit through the platform's sender."""
        await self._sender(edit.message.conversation.platform).edit(edit)

    async def mark(
        self,
        conversation: ConversationKey,
        message_id: str,
        state: TurnState,
        *,
        previous: TurnState | None,
    ) -> None:
        """Mark through the platform's sender."""
        await self._sender(conversation.platform).mark(
            conversation, message_id, state, previous=previous
        )

    async def session(
        self, conversation: ConversationKey, state: TurnState, *, title: str, user: str
    ) -> None:
        """Through the platform's sender (nothing for a platform not configured)."""
        sender = self._senders.get(conversation.platform)
        if sender is not None:
            await sender.session(conversation, state, title=title, user=user)

    async def direct(self, user: str, *, workspace: str) -> ConversationKey | None:
        """Through the sender of ``user``'s platform (``platform:id``); None for a platform
        not configured."""
        sender = next((s for p, s in self._senders.items() if user.startswith(f"{p}:")), None)
        return None if sender is None else await sender.direct(user, workspace=workspace)

    def live(
        self,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
        user: str,
    ) -> LiveReply | None:
        """The platform's live reply, if it has one (none for a platform not configured)."""
        sender = self._senders.get(conversation.platform)
        if sender is None:
            return None
        return sender.live(conversation, key=key, message=message, reply_to=reply_to, user=user)
