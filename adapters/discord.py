"""Discord: gateway messages and button interactions to events, replies and prompts to
Discord over REST (discord.py).

Parsing is pure: what a message or an interaction says (:class:`MessageFacts`,
:func:`button_press`) comes either from a recorded gateway dispatch (the contract tests) or
from discord.py's objects (the gateway), and one function decides what it means. Identity:

- a conversation is (``discord``, guild id or ``@me``, channel id, thread id): a DM is one,
  a channel is one, a thread is its own (under its parent channel);
- the ledger key of a message is ``msg:{message id}``: a RESUME replays missed events, and
  the ledger drops the ones already stored;
- users are ``discord:{user id}``.

Only DMs, messages that mention the bot (or reply to it), and messages in threads the bot
is in count; other bots, webhooks and system messages are ignored.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.base import BadRequest
from adapters.chunking import DISCORD_LIMIT, split_message
from adapters.markdown import to_discord
from agent_core.approval_text import for_prompt
from agent_core.errors import DeliveryError
from agent_core.events import (
    ApprovalPrompt,
    Attachment,
    ButtonPress,
    ConversationKey,
    Edit,
    InboundMessage,
    MessageRef,
    Reply,
)

if TYPE_CHECKING:
    import discord

DM = "@me"
# A button's custom_id (at most 100 characters): who it is for, what it does, to what.
CUSTOM_ID = re.compile(r"cg:(?P<kind>ap|job):(?P<action>[a-z_]+):(?P<target>[A-Za-z0-9_]{1,40})")
ACTIONS = {"approve": "approve", "allow": "allow_conversation", "deny": "deny"}
JOB_ACTIONS = ("pause", "resume", "delete")
BUTTONS = (("approve", "Approve", "success"), ("allow", "Allow in this conversation", "primary"),
           ("deny", "Deny", "danger"))  # fmt: skip
_JOB_BUTTONS = {
    "active": (("pause", "Pause"), ("delete", "Delete")),
    "paused": (("resume", "Resume"), ("delete", "Delete")),
    "done": (("delete", "Delete"),),
}
# Default (0) and reply (19) are people writing; joins, pins, thread starts ... are not.
_PERSON_TYPES = frozenset({0, 19})
# Thread channel types: announcement, public and private threads.
THREAD_TYPES = frozenset({10, 11, 12})
# A nonce is at most 25 characters.
_NONCE_CHARS = 25
# Five rows of up to five buttons: two per schedule leaves room for 10 schedules.
_MAX_JOBS = 10


def user_id(discord_user: int | str) -> str:
    """Our name for a Discord user."""
    return f"discord:{discord_user}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageFacts:
    """What a gateway message says, from a dispatch or from discord.py's ``Message``."""

    message_id: str
    channel_id: str
    guild_id: str | None
    author_id: str
    author_is_bot: bool
    webhook: bool
    type: int
    content: str
    mentions: tuple[str, ...]
    replied_to_author: str | None = None
    thread_parent: str | None = None  # set when the channel is a thread
    bot_in_thread: bool = False
    attachments: tuple[Attachment, ...] = ()


def facts_from_dispatch(
    data: Mapping[str, Any], *, thread_parent: str | None = None, bot_in_thread: bool = False
) -> MessageFacts:
    """A ``MESSAGE_CREATE`` dispatch's data; the caller says what its cache knows of the
    channel (a thread's parent, whether the bot is in it)."""
    author = data.get("author")
    if not isinstance(author, Mapping) or "id" not in author or "id" not in data:
        raise BadRequest("a message needs 'id' and 'author'")
    if "channel_id" not in data:
        raise BadRequest("a message needs 'channel_id'")
    referenced = data.get("referenced_message")
    replied = referenced.get("author") if isinstance(referenced, Mapping) else None
    return MessageFacts(
        message_id=str(data["id"]),
        channel_id=str(data["channel_id"]),
        guild_id=str(data["guild_id"]) if data.get("guild_id") else None,
        author_id=str(author["id"]),
        author_is_bot=bool(author.get("bot")) or bool(author.get("system")),
        webhook=bool(data.get("webhook_id")),
        type=int(data.get("type", 0)),
        content=str(data.get("content") or ""),
        mentions=tuple(str(m["id"]) for m in data.get("mentions") or () if isinstance(m, Mapping)),
        replied_to_author=str(replied["id"]) if isinstance(replied, Mapping) else None,
        thread_parent=thread_parent,
        bot_in_thread=bot_in_thread,
        attachments=tuple(
            attachment(a) for a in data.get("attachments") or () if isinstance(a, Mapping)
        ),
    )


def inbound(facts: MessageFacts, *, bot_id: str) -> InboundMessage | None:
    """The message as an event, or None when the agent does not answer it."""
    if facts.author_is_bot or facts.webhook or facts.author_id == bot_id:
        return None
    if facts.type not in _PERSON_TYPES:
        return None
    mentioned = bot_id in facts.mentions or facts.replied_to_author == bot_id
    if facts.guild_id is None:
        workspace, channel, thread = DM, facts.channel_id, None
    elif facts.thread_parent is not None:
        if not (mentioned or facts.bot_in_thread):
            return None
        workspace, channel, thread = facts.guild_id, facts.thread_parent, facts.channel_id
    elif mentioned:
        workspace, channel, thread = facts.guild_id, facts.channel_id, None
    else:
        return None
    text = re.sub(rf"^\s*<@!?{re.escape(bot_id)}>[\s:,]*", "", facts.content)
    if not text.strip() and not facts.attachments:
        return None
    return InboundMessage(
        platform="discord",
        workspace=workspace,
        channel=channel,
        thread=thread,
        user=user_id(facts.author_id),
        text=text.strip() or "(attachment)",
        platform_event_id=f"msg:{facts.message_id}",
        mentions=tuple(user_id(m) for m in facts.mentions),
        attachments=facts.attachments,
        reply_to=facts.message_id,
        raw={"channel_id": facts.channel_id},
    )


def button_press(
    *,
    interaction_id: str,
    custom_id: str,
    user: str,
    guild_id: str | None,
    channel_id: str,
    thread_parent: str | None,
    message_id: str | None,
) -> ButtonPress | None:
    """A component interaction as a button press, or None when the button is not ours."""
    match = CUSTOM_ID.fullmatch(custom_id)
    if match is None:
        return None
    kind, action, target = match["kind"], match["action"], match["target"]
    if (kind == "ap" and action not in ACTIONS) or (kind == "job" and action not in JOB_ACTIONS):
        return None
    key = ConversationKey(
        platform="discord",
        workspace=guild_id or DM,
        channel=thread_parent or channel_id,
        thread=channel_id if thread_parent else None,
    )
    return ButtonPress(
        platform="discord",
        workspace=key.workspace,
        channel=key.channel,
        thread=key.thread,
        user=user_id(user),
        approval_id=target if kind == "ap" else None,
        action=ACTIONS[action] if kind == "ap" else action,
        value=target,
        message=MessageRef(conversation=key, message_id=message_id) if message_id else None,
        platform_event_id=f"int:{interaction_id}",
        raw={"channel_id": channel_id},
    )


def parse_interaction(data: Mapping[str, Any]) -> ButtonPress | None:
    """An ``INTERACTION_CREATE`` dispatch's data as a button press (None when it is not a
    press of one of our buttons)."""
    if data.get("type") != 3:  # MESSAGE_COMPONENT
        return None
    member = data.get("member")
    who = member.get("user") if isinstance(member, Mapping) else data.get("user")
    component = data.get("data")
    if not isinstance(who, Mapping) or not isinstance(component, Mapping) or "id" not in data:
        raise BadRequest("an interaction needs 'id', 'data' and 'member' or 'user'")
    channel = data.get("channel")
    thread_parent = None
    if isinstance(channel, Mapping) and channel.get("type") in THREAD_TYPES:
        thread_parent = str(channel.get("parent_id"))
    message = data.get("message")
    return button_press(
        interaction_id=str(data["id"]),
        custom_id=str(component.get("custom_id", "")),
        user=str(who["id"]),
        guild_id=str(data["guild_id"]) if data.get("guild_id") else None,
        channel_id=str(data.get("channel_id")),
        thread_parent=thread_parent,
        message_id=str(message["id"]) if isinstance(message, Mapping) else None,
    )


def attachment(item: Mapping[str, Any]) -> Attachment:
    """A message attachment object as an attachment."""
    size = item.get("size")
    return Attachment(
        name=str(item.get("filename") or "file"),
        mime_type=str(item["content_type"]) if item.get("content_type") else None,
        size=size if isinstance(size, int) else None,
        url=str(item["url"]) if item.get("url") else None,
        platform_file_id=str(item["id"]) if item.get("id") else None,
    )


def nonce(key: str) -> str:
    """A stable nonce (at most 25 characters) for a delivery: Discord returns the message
    already sent with it instead of sending it twice."""
    return hashlib.sha256(key.encode()).hexdigest()[:_NONCE_CHARS]


def approval_content(prompt: ApprovalPrompt) -> str:
    """The prompt's words: what would run, with which arguments (in a code block)."""
    shown = for_prompt(prompt.arguments)
    arguments = shown.text.replace("```", "`\u200b``")
    warning = f"\n⚠ {shown.warning}" if shown.warning else ""
    return (
        f"**Allow `{prompt.tool}`?** (approval `{prompt.approval_id}`){warning}\n"
        f"```json\n{arguments}\n```"
    )


def custom_id(kind: str, action: str, target: str) -> str:
    """A button's custom_id, checked against our template."""
    value = f"cg:{kind}:{action}:{target}"
    if CUSTOM_ID.fullmatch(value) is None:
        raise ValueError(f"not a chatgate custom_id: {value!r}")
    return value


_BUTTON_CLASS: Any = None


def _dynamic_button() -> Any:
    global _BUTTON_CLASS
    if _BUTTON_CLASS is not None:
        return _BUTTON_CLASS
    import discord
    from discord import ui

    class ChatgateButton(ui.DynamicItem[ui.Button[Any]], template=CUSTOM_ID):
        """One of our buttons. Rebuilt from its custom_id by any client that registered the
        class, so buttons on messages sent before a restart still work."""

        def __init__(
            self, kind: str, action: str, target: str, label: str = "", style: str = "secondary"
        ) -> None:
            super().__init__(
                ui.Button(
                    label=label or action.title(),
                    style=getattr(discord.ButtonStyle, style),
                    custom_id=custom_id(kind, action, target),
                )
            )
            self.kind, self.action, self.target = kind, action, target

        @classmethod
        async def from_custom_id(
            cls, interaction: discord.Interaction, item: ui.Item[Any], match: re.Match[str]
        ) -> ChatgateButton:
            label = item.label if isinstance(item, ui.Button) else None
            return cls(match["kind"], match["action"], match["target"], label=label or "")

        async def callback(self, interaction: discord.Interaction) -> None:
            handler = getattr(interaction.client, "chatgate_press", None)
            if handler is not None:
                await handler(interaction, self.custom_id)

    _BUTTON_CLASS = ChatgateButton
    return ChatgateButton


def button_class() -> Any:
    """The DynamicItem class the gateway registers (``Client.add_dynamic_items``)."""
    return _dynamic_button()


def approval_view(prompt: ApprovalPrompt) -> discord.ui.View:
    """The three buttons; each custom_id carries the approval id."""
    from discord import ui

    button = _dynamic_button()
    view = ui.View(timeout=None)
    for action, label, style in BUTTONS:
        view.add_item(button("ap", action, prompt.approval_id, label=label, style=style))
    return view


def jobs_view(jobs: Sequence[Mapping[str, Any]]) -> discord.ui.View | None:
    """Per schedule: pause or resume, and delete."""
    from discord import ui

    button = _dynamic_button()
    view = ui.View(timeout=None)
    for job in jobs[:_MAX_JOBS]:
        target = str(job.get("id", ""))
        for action, label in _JOB_BUTTONS.get(str(job.get("status")), ()):
            view.add_item(button("job", action, target, label=f"{label} {target}"))
    return view if view.children else None


def _payload_view(payload: Mapping[str, Any] | None) -> discord.ui.View | None:
    jobs = (payload or {}).get("jobs")
    if not isinstance(jobs, list):
        return None
    return jobs_view([j for j in jobs if isinstance(j, Mapping)])


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

    async def send(self, reply: Reply | ApprovalPrompt) -> str:
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
        try:
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
        except discord.HTTPException as exc:
            raise DeliveryError(f"discord: {exc}") from exc
        if self.on_sent is not None:
            self.on_sent(channel.id)
        return receipts[0]

    async def edit(self, edit: Edit) -> None:
        """Replace a message (a decided prompt loses its buttons; a listing is redrawn)."""
        import discord

        client = await self.client()
        where = edit.message.conversation
        channel = client.get_partial_messageable(int(where.thread or where.channel))
        message = channel.get_partial_message(int(edit.message.message_id))
        content = split_message(to_discord(edit.text), DISCORD_LIMIT)[0]
        try:
            await message.edit(
                content=content,
                view=_payload_view(edit.payload),
                allowed_mentions=discord.AllowedMentions.none(),
            )
        except discord.HTTPException as exc:
            raise DeliveryError(f"discord: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Application:
    """What ``chatgate doctor`` and ``chatgate discord invite-url`` need to know."""

    id: int
    bot: str
    message_content: bool  # the privileged intent is switched on
    interactions_url: str | None  # set: button presses go there, not over the gateway


async def application(token: str, *, api_url: str) -> Application:
    """Log in over REST and read the application (``discord.LoginFailure`` for a bad
    token)."""
    import discord

    point_at(api_url)
    client = discord.Client(intents=discord.Intents.none())
    try:
        await client.login(token)
        info = await client.application_info()
        flags = info.flags
        return Application(
            id=info.id,
            bot=str(client.user),
            message_content=flags.gateway_message_content or flags.gateway_message_content_limited,
            interactions_url=info.interactions_endpoint_url,
        )
    finally:
        await client.close()


def invite_url(application_id: int) -> str:
    """The URL that adds the bot to a server with the permissions chatgate uses."""
    import discord

    permissions = discord.Permissions(
        view_channel=True,
        send_messages=True,
        send_messages_in_threads=True,
        read_message_history=True,
        embed_links=True,
        attach_files=True,
    )
    return discord.utils.oauth_url(application_id, permissions=permissions, scopes=("bot",))


def point_at(api_url: str) -> None:
    """Point discord.py's REST calls at ``DISCORD_API_URL`` (a class attribute: discord.py
    has no option for it), and keep it quiet about voice, which chatgate does not use."""
    import discord.http

    discord.http.Route.BASE = api_url.rstrip("/")
    discord.VoiceClient.warn_nacl = False
    discord.VoiceClient.warn_dave = False
