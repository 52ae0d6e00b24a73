"""The outbound client over Discord's REST API (discord.py, no gateway connection);
Discord's errors become ``DeliveryError`` in one place (``_delivered``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from adapters.chunking import DISCORD_LIMIT, split_message
from adapters.discord.commands import INTERACTION_PREFIX
from adapters.discord.parse import DM
from adapters.discord.pending import Deferred, PendingInteractions
from adapters.discord.render import (
    approval_content,
    approval_view,
    choices_view,
    jobs_view,
    nonce,
    stop_view,
)
from adapters.downloads import check_host, download, host_of
from adapters.markdown import to_discord
from agent_core.delivery import ChunkSent
from agent_core.errors import DeliveryError
from agent_core.events import ApprovalPrompt, ConversationKey, Edit, OutgoingFile, Reply
from agent_core.files.fetching import FileUnavailable
from agent_core.journaled import Choices, JobsListing
from agent_core.records import AttachmentRecord, TurnState

log = structlog.get_logger("chatgate.discord")

if TYPE_CHECKING:
    import aiohttp
    import discord


@contextlib.contextmanager
def _delivered() -> Iterator[None]:
    """Discord's refusals as ours."""
    import discord

    try:
        yield
    except discord.HTTPException as exc:
        raise DeliveryError(f"discord: {exc}") from exc


def _payload_view(payload: Mapping[str, Any] | None) -> discord.ui.View | None:
    """A ``jobs`` listing's buttons, or a question's, when the payload holds one."""
    listing = JobsListing.from_payload(payload)
    if listing is not None:
        return jobs_view(listing.jobs)
    choices = Choices.from_payload(payload)
    return choices_view(choices.choices) if choices is not None else None


REACTIONS: dict[TurnState, str] = {
    "received": "👀",
    "working": "⏳",
    "waiting": "✋",
    "done": "✅",
    "failed": "❌",
}
"""The reaction a turn's state shows on the message that opened it."""


# Where Discord keeps attachments.
CDN_HOSTS = ("cdn.discordapp.com", "media.discordapp.net")


class DiscordSender:
    """The send-only client over REST (no gateway connection): replies, prompts, edits.

    Rate limits are discord.py's: it waits out 429s per route bucket. Every delivery has a
    stable nonce with ``enforce_nonce``, so a resend after a crash returns the message
    already sent instead of posting it twice.
    """

    def __init__(self, token: str, *, api_url: str) -> None:
        self._token = token
        self._api_url = api_url.rstrip("/")
        self._client: discord.Client | None = None
        self._files: aiohttp.ClientSession | None = None  # attachment downloads (``fetch``)
        # Told the channel id after each delivery (the gateway stops typing there).
        self.on_sent: Callable[[int], None] | None = None
        # Interactions the gateway deferred here, answered through their tokens.
        self.interactions = PendingInteractions()

    async def open(self) -> None:
        """Nothing to open yet: the client logs in on first use."""

    async def client(self) -> discord.Client:
        """The logged-in REST client (``GET /users/@me`` on first use)."""
        if self._client is None:
            import discord

            point_at(self._api_url)
            client = discord.Client(intents=discord.Intents.none())
            await client.login(self._token)
            self._client = client
        return self._client

    def use(self, client: discord.Client) -> None:
        """Share the gateway's logged-in client instead of logging in again."""
        self._client = client

    def forget(self, client: discord.Client) -> None:
        """The gateway closed ``client``: log in afresh next time."""
        if self._client is client:
            self._client = None

    async def close(self) -> None:
        """Close the HTTP sessions."""
        if self._client is not None:
            await self._client.close()
        if self._files is not None:
            await self._files.close()
            self._files = None

    async def send_file(self, file: OutgoingFile) -> str:
        """An attachment on a message in the thread or channel, the caption as its text,
        with the call's nonce: sent again after a crash, Discord answers with the message
        already sent."""
        import io

        import discord

        channel = await self._channel(file.conversation)
        with _delivered():
            sent = await channel.send(
                (file.caption or "")[:DISCORD_LIMIT] or None,
                file=discord.File(io.BytesIO(file.data), filename=file.name),
                nonce=nonce(f"{file.idempotency_key}:file"),
                allowed_mentions=discord.AllowedMentions.none(),
            )
        return str(sent.id)

    async def fetch(self, file: AttachmentRecord, *, limit: int) -> AsyncIterator[bytes]:
        """An attachment, from Discord's CDN (its signed link, no token)."""
        import aiohttp

        if not file.url:
            raise FileUnavailable("Discord gave no link to it")
        hosts = (host_of(self._api_url), *CDN_HOSTS)
        check_host(file.url, hosts, platform="Discord")
        if self._files is None:
            self._files = aiohttp.ClientSession()
        async for chunk in download(self._files, file.url, platform="Discord"):
            yield chunk

    async def _channel(self, where: ConversationKey) -> discord.PartialMessageable:
        client = await self.client()
        return client.get_partial_messageable(int(where.thread or where.channel))

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        """Send in the thread or channel, the first message replying to the triggering one;
        long text goes in several messages. The receipt is the first message's id. A reply
        shown as it was written goes into that message (its first chunk), unless the
        message is gone."""
        import discord

        if isinstance(reply, Reply) and reply.answers:
            deferred = self.interactions.command(reply.answers)
            if deferred is not None:
                answered = await self._answer(deferred, reply)
                if answered is not None:
                    return answered
            if reply.private_to and reply.answers.startswith(INTERACTION_PREFIX):
                # A slash command's private answer, whose interaction this process cannot
                # answer (another one took it, or it expired): never shown to the channel.
                log.warning("a private answer was not delivered: its interaction is gone",
                            answers=reply.answers)  # fmt: skip
                return f"undelivered:{reply.answers}"
        channel = await self._channel(reply.conversation)
        reference = _reference(reply.reply_to, channel.id)
        if isinstance(reply, ApprovalPrompt):
            chunks = [approval_content(reply)]
            view: discord.ui.View | None = approval_view(reply)
        else:
            chunks = split_message(to_discord(reply.text), DISCORD_LIMIT)
            view = _payload_view(reply.payload)
        receipts: list[str] = []
        live = reply.live_message if isinstance(reply, Reply) else None
        if live is not None and await self._finish(channel, live, chunks[0], view, len(chunks)):
            receipts.append(live)
        with _delivered():
            for index in range(len(receipts), len(chunks)):
                chunk, last = chunks[index], index == len(chunks) - 1
                sent = await channel.send(
                    chunk,
                    nonce=nonce(f"{reply.idempotency_key}:{index}"),
                    allowed_mentions=discord.AllowedMentions.none(),
                    reference=reference if index == 0 else None,  # type: ignore[arg-type]
                    view=view if last and view is not None else discord.utils.MISSING,
                )
                receipts.append(str(sent.id))
        if self.on_sent is not None:
            self.on_sent(channel.id)
        return receipts[0]

    async def _answer(self, deferred: Deferred, reply: Reply) -> str | None:
        """Answer a command's interaction with followups (ephemeral when the answer is
        the caller's alone), the listing's buttons on the last; None when the interaction
        cannot be answered any more (its token expired): the reply goes to the channel."""
        import discord

        chunks = split_message(to_discord(reply.text), DISCORD_LIMIT)
        view = _payload_view(reply.payload)
        ephemeral = deferred.ephemeral or reply.private_to is not None
        followup = deferred.interaction.followup
        receipts: list[str] = []
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            try:
                sent = await followup.send(
                    chunk,
                    ephemeral=ephemeral,
                    allowed_mentions=discord.AllowedMentions.none(),
                    view=view if last and view is not None else discord.utils.MISSING,
                    wait=True,
                )
            except discord.HTTPException as exc:
                if not receipts:
                    return None  # nothing shown yet: the channel gets it whole
                raise DeliveryError(f"discord: {exc}") from exc
            receipts.append(str(sent.id))
        deferred.answered = True
        return receipts[0]

    async def _finish(
        self,
        channel: discord.PartialMessageable,
        message: str,
        content: str,
        view: discord.ui.View | None,
        chunks: int,
    ) -> bool:
        """Put the reply's first chunk into the message it was shown in; False when that
        message is gone (deleted meanwhile), so the reply is posted afresh."""
        import discord

        with _delivered():
            try:
                await channel.get_partial_message(int(message)).edit(
                    content=content,
                    view=view if chunks == 1 else None,
                    allowed_mentions=discord.AllowedMentions.none(),
                )
            except discord.NotFound:
                return False
        return True

    async def session(
        self, conversation: ConversationKey, state: TurnState, *, title: str, user: str
    ) -> None:
        """Nothing: no session status here (marks and the Stop button say it)."""

    async def direct(self, user: str, *, workspace: str) -> ConversationKey | None:
        """The DM channel with the person (``POST /users/@me/channels``, which returns
        the one that exists)."""
        bare = user.removeprefix("discord:")
        if bare == user or not bare.isdigit():
            return None
        client = await self.client()
        with _delivered():
            channel = await client.http.start_private_message(int(bare))
        return ConversationKey(platform="discord", workspace=DM, channel=str(channel["id"]))

    async def mark(
        self,
        conversation: ConversationKey,
        message_id: str,
        state: TurnState,
        *,
        previous: TurnState | None,
    ) -> None:
        """The bot's reaction on the message, the one for ``previous`` taken off (the
        gateway shows "typing…" itself while a turn runs)."""
        if state == previous:
            return
        client = await self.client()
        channel = int(conversation.thread or conversation.channel)
        with _delivered():
            if previous is not None:
                await client.http.remove_own_reaction(channel, int(message_id), REACTIONS[previous])
            await client.http.add_reaction(channel, int(message_id), REACTIONS[state])

    def live(
        self,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
        user: str,
    ) -> DiscordLiveReply:
        """One message, posted by the first update and edited after."""
        return DiscordLiveReply(self, conversation, key=key, message=message, reply_to=reply_to)

    async def edit(self, edit: Edit) -> None:
        """Replace a message (a decided prompt loses its buttons; a listing is redrawn)."""
        import discord

        content = split_message(to_discord(edit.text), DISCORD_LIMIT)[0]
        press = self.interactions.press_on(edit.message.message_id)
        if press is not None:
            # An ephemeral message: only the press that came from it can edit it.
            with _delivered():
                await press.edit_original_response(
                    content=content,
                    view=_payload_view(edit.payload),
                    allowed_mentions=discord.AllowedMentions.none(),
                )
            return
        client = await self.client()
        where = edit.message.conversation
        channel = client.get_partial_messageable(int(where.thread or where.channel))
        message = channel.get_partial_message(int(edit.message.message_id))
        with _delivered():
            await message.edit(
                content=content,
                view=_payload_view(edit.payload),
                allowed_mentions=discord.AllowedMentions.none(),
            )


def point_at(api_url: str) -> None:
    """Point discord.py's REST calls at ``DISCORD_API_URL`` (a class attribute: discord.py
    has no option for it), and keep it quiet about voice, which chatgate does not use."""
    import discord.http

    discord.http.Route.BASE = api_url.rstrip("/")
    discord.VoiceClient.warn_nacl = False
    discord.VoiceClient.warn_dave = False


class DiscordLiveReply:
    """A reply shown as it is written: posted once (a reply to the triggering message, with
    a nonce so a retried post is not a second message), then edited, with a Stop button
    that stops the turn (the reply, delivered into the message, takes it off). Discord allows five
    messages or edits per five seconds in a channel: one update every 1.2 s at most leaves
    room for everything else. discord.py waits out a 429 itself."""

    interval = 1.2
    posts = True

    def __init__(
        self,
        sender: DiscordSender,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
    ) -> None:
        self._sender = sender
        self._conversation = conversation
        self._key = key
        self._reply_to = reply_to
        self.message = message

    async def recover(self) -> None:
        """Post again with the first post's nonce: Discord answers with the message an
        earlier attempt posted, if it did (within the nonce's few minutes), else this one
        is the message."""
        await self.show("", status=None)

    async def show(self, text: str, *, status: str | None) -> None:
        """Post or edit the message with the text so far (as much as fits in one message)
        and the status, in italics, under it."""
        import discord

        content = _draft(text, status)
        channel = await self._sender._channel(self._conversation)
        with _delivered():
            if self.message is None:
                sent = await channel.send(
                    content,
                    nonce=nonce(f"{self._key}:live"),
                    allowed_mentions=discord.AllowedMentions.none(),
                    reference=_reference(self._reply_to, channel.id),  # type: ignore[arg-type]
                    view=stop_view(self._key) or discord.utils.MISSING,
                )
                self.message = str(sent.id)
                return
            await channel.get_partial_message(int(self.message)).edit(
                content=content,
                allowed_mentions=discord.AllowedMentions.none(),
                view=stop_view(self._key),
            )

    async def close(self) -> None:
        """Nothing to end: the reply is delivered into the message."""


def _draft(text: str, status: str | None) -> str:
    """What an update shows: the text so far (its first message's worth) and the status."""
    shown = split_message(to_discord(text), DISCORD_LIMIT - 200)[0] if text.strip() else ""
    line = f"*{status}*" if status else ("" if shown else "…")
    return "\n\n".join(part for part in (shown, line) if part)


def _reference(reply_to: str | None, channel_id: int) -> discord.MessageReference | None:
    """A reply to the triggering message (a message id), when there is one."""
    import discord

    if not reply_to or not reply_to.isdigit():
        return None
    return discord.MessageReference(
        message_id=int(reply_to), channel_id=channel_id, fail_if_not_exists=False
    )
