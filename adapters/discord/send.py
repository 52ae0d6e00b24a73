"""The outbound client over Discord's REST API (discord.py, no gateway connection);
Discord's errors become ``DeliveryError`` in one place (``_delivered``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from adapters.chunking import DISCORD_LIMIT, split_message
from adapters.discord.render import approval_content, approval_view, jobs_view, nonce
from adapters.markdown import to_discord
from agent_core.delivery import ChunkSent
from agent_core.errors import DeliveryError
from agent_core.events import ApprovalPrompt, ConversationKey, Edit, Reply
from agent_core.journaled import JobsListing

if TYPE_CHECKING:
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
    """A ``jobs`` listing's buttons, when the payload holds one."""
    listing = JobsListing.from_payload(payload)
    return jobs_view(listing.jobs) if listing is not None else None


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
        # Told the channel id after each delivery (the gateway stops typing there).
        self.on_sent: Callable[[int], None] | None = None

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
        """Close the HTTP session."""
        if self._client is not None:
            await self._client.close()

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        """Send in the thread or channel, the first message replying to the triggering one;
        long text goes in several messages. The receipt is the first message's id."""
        import discord

        client = await self.client()
        where = reply.conversation
        channel = client.get_partial_messageable(int(where.thread or where.channel))
        reference = (
            discord.MessageReference(
                message_id=int(reply.reply_to),
                channel_id=channel.id,
                fail_if_not_exists=False,
            )
            if reply.reply_to and reply.reply_to.isdigit()
            else None
        )
        if isinstance(reply, ApprovalPrompt):
            chunks = [approval_content(reply)]
            view: discord.ui.View | None = approval_view(reply)
        else:
            chunks = split_message(to_discord(reply.text), DISCORD_LIMIT)
            view = _payload_view(reply.payload)
        receipts: list[str] = []
        with _delivered():
            for index, chunk in enumerate(chunks):
                last = index == len(chunks) - 1
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

    def live(
        self,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
    ) -> None:
        """None: a reply on Discord is posted once it is written, not shown as it grows."""
        return None

    async def edit(self, edit: Edit) -> None:
        """Replace a message (a decided prompt loses its buttons; a listing is redrawn)."""
        import discord

        client = await self.client()
        where = edit.message.conversation
        channel = client.get_partial_messageable(int(where.thread or where.channel))
        message = channel.get_partial_message(int(edit.message.message_id))
        content = split_message(to_discord(edit.text), DISCORD_LIMIT)[0]
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
