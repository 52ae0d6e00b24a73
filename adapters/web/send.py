"""Delivery to the web chat: the database *is* the medium. A reply is delivered once its
message row exists (the turn journals it before sending), so :class:`WebSender` only wakes
the browsers watching the conversation; browsers also poll, so a reply written by another
gateway process still arrives."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from adapters.web.uploads import Uploads
from agent_core.delivery import ChunkSent
from agent_core.errors import DeliveryError
from agent_core.events import ApprovalPrompt, ConversationKey, Edit, OutgoingFile, Reply
from agent_core.files.blobs import Blobs
from agent_core.files.fetching import FileUnavailable
from agent_core.records import AttachmentRecord, TurnState


@dataclass(frozen=True, slots=True)
class Draft:
    """A reply as far as the model has written it (``version`` grows with each update)."""

    text: str
    status: str | None
    version: int


class WebHub:
    """Wakes the streams watching a conversation when something new is stored in it, and
    holds the reply being written in each conversation (its draft) for them to show.

    Drafts live in this process: a page following a conversation through another gateway
    sees the reply when it is stored, not as it grows."""

    def __init__(self) -> None:
        self._waiters: defaultdict[ConversationKey, set[asyncio.Event]] = defaultdict(set)
        self._drafts: dict[ConversationKey, Draft] = {}
        self._versions = itertools.count(1)

    def draft(self, conversation: ConversationKey) -> Draft | None:
        """The reply being written in the conversation now, if one is."""
        return self._drafts.get(conversation)

    def write_draft(self, conversation: ConversationKey, text: str, status: str | None) -> None:
        """Keep the reply so far and wake the conversation's streams."""
        self._drafts[conversation] = Draft(text, status, next(self._versions))
        self.publish(conversation)

    def drop_draft(self, conversation: ConversationKey) -> None:
        """The draft is over. The streams are not woken for it: the reply (or the approval
        prompt) that follows is, and replaces the draft on the page without a gap."""
        self._drafts.pop(conversation, None)

    def publish(self, conversation: ConversationKey) -> None:
        """Wake every stream of this conversation."""
        for waiter in self._waiters.get(conversation, ()):
            waiter.set()

    @contextlib.contextmanager
    def watching(self, conversation: ConversationKey) -> Iterator[asyncio.Event]:
        """An event set whenever the conversation changes, for as long as the block runs
        (registered before the first read, so no change between a read and a wait is
        missed: clear it, read, then wait on it)."""
        waiter = asyncio.Event()
        self._waiters[conversation].add(waiter)
        try:
            yield waiter
        finally:
            self._waiters[conversation].discard(waiter)
            if not self._waiters[conversation]:
                del self._waiters[conversation]


# A web receipt for a file: the file store's hash of it.
WEB_FILE = "web-file:"


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


class WebSender:
    """Delivers web replies: the row is already stored, so wake the conversation's streams."""

    def __init__(
        self, hub: WebHub, uploads: Uploads | None = None, files: Blobs | None = None
    ) -> None:
        self._hub = hub
        self._uploads = uploads
        self._files = files

    async def send_file(self, file: OutgoingFile) -> str:
        """Keep the file (by its content: sending it twice keeps it once); the page shows
        the conversation's note of it as a download link (``GET /api/files/{note}``)."""
        if self._files is None:
            raise DeliveryError("the web chat keeps no files here")
        blob = await self._files.put(_once(file.data), limit=len(file.data))
        self._hub.publish(file.conversation)
        return f"{WEB_FILE}{blob.sha256}"

    async def fetch(self, file: AttachmentRecord, *, limit: int) -> AsyncIterator[bytes]:
        """A file uploaded with the message (``POST /api/uploads``), by its id."""
        if self._uploads is None or not file.platform_file_id:
            raise FileUnavailable("no such upload")
        try:
            async for chunk in self._uploads.read(file.platform_file_id):
                yield chunk
        except FileNotFoundError:
            raise FileUnavailable("the upload is gone (uploads are kept a day)") from None

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        """Publish the reply to the streams; the receipt is the reply's delivery key."""
        self._hub.publish(reply.conversation)
        return f"web:{reply.idempotency_key}"

    async def edit(self, edit: Edit) -> None:
        """The decision is already stored beside the prompt: wake the streams."""
        self._hub.publish(edit.message.conversation)

    async def mark(
        self,
        conversation: ConversationKey,
        message_id: str,
        state: TurnState,
        *,
        previous: TurnState | None,
    ) -> None:
        """Nothing: the page says the agent is thinking, and shows an approval it waits for."""

    async def session(
        self, conversation: ConversationKey, state: TurnState, *, title: str, user: str
    ) -> None:
        """Nothing: the web chat has no session status of its own."""

    async def direct(self, user: str, *, workspace: str) -> ConversationKey | None:
        """None: the web chat has one principal and no direct messages."""
        return None

    def live(
        self,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
        user: str,
    ) -> WebLiveReply:
        """The page's draft of the reply, on the conversation's stream."""
        return WebLiveReply(self._hub, conversation)

    async def open(self) -> None:
        """Nothing to open."""

    async def close(self) -> None:
        """Nothing to close."""


class WebLiveReply:
    """A reply shown on the page as it is written: the draft in the hub, sent by the
    conversation's streams (ten updates a second at most)."""

    interval = 0.1
    message = None  # the page's draft is no message: the stored reply replaces it
    posts = False

    async def recover(self) -> None:
        """Nothing was posted."""

    def __init__(self, hub: WebHub, conversation: ConversationKey) -> None:
        self._hub = hub
        self._conversation = conversation

    async def show(self, text: str, *, status: str | None) -> None:
        """Put the text so far in the hub."""
        self._hub.write_draft(self._conversation, text, status)

    async def close(self) -> None:
        """Take the draft away (the stored reply replaces it)."""
        self._hub.drop_draft(self._conversation)
