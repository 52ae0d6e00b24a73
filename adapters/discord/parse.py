"""Discord's messages and button interactions to events (pure).

What a message or an interaction says (:class:`MessageFacts`, :func:`button_press`) comes
either from a recorded gateway dispatch (the contract tests) or from discord.py's objects
(``adapters.discord.inbound``), and one function decides what it means. Identity:

- a conversation is (``discord``, guild id or ``@me``, channel id, thread id): a DM is one,
  a channel is one, a thread is its own (under its parent channel);
- the ledger key of a message is ``msg:{message id}``: a RESUME replays missed events, and
  the ledger drops the ones already stored;
- users are ``discord:{user id}``.

Only DMs, messages that mention the bot (or reply to it), and messages in threads the bot
is in count; other bots, webhooks and system messages are ignored.

A 👍 or 👎 added to or removed from a message (``MESSAGE_REACTION_ADD`` / ``_REMOVE``) is a
:class:`~agent_core.events.Reaction` when the message is the bot's (as far as the event
says: Discord names the author on adds only) and the reactor is not the bot.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.base import BadRequest
from adapters.reactions import rating_of
from agent_core.events import (
    Attachment,
    ButtonAction,
    ButtonPress,
    ConversationKey,
    InboundMessage,
    MessageDeleted,
    MessageRef,
    Quote,
    Reaction,
)

DM = "@me"
# A button's custom_id (at most 100 characters): who it is for, what it does, to what.
CUSTOM_ID = re.compile(
    r"cg:(?P<kind>ap|job|turn|ask|q):(?P<action>[a-z_]+):(?P<target>[A-Za-z0-9_]{1,40})"
)
ACTIONS: dict[str, ButtonAction] = {
    "approve": "approve",
    "allow": "allow_conversation",
    "deny": "deny",
}
JOB_ACTIONS: dict[str, ButtonAction] = {"pause": "pause", "resume": "resume", "delete": "delete"}
TURN_ACTIONS: dict[str, ButtonAction] = {"stop": "stop"}
# Buttons that answer a question chatgate asked (``forget me``'s confirmation).
CHOICE_ACTIONS: dict[str, ButtonAction] = {"forget": "forget"}
# An ``ask_user`` question's buttons: ``cg:q:answer:APPROVAL_INDEX``, ``cg:q:other:APPROVAL``.
QUESTION_ACTIONS: dict[str, ButtonAction] = {"answer": "answer", "other": "other"}
_KINDS = {
    "ap": ACTIONS,
    "job": JOB_ACTIONS,
    "turn": TURN_ACTIONS,
    "ask": CHOICE_ACTIONS,
    "q": QUESTION_ACTIONS,
}
# Default (0) and reply (19) are people writing; joins, pins, thread starts ... are not.
_PERSON_TYPES = frozenset({0, 19})
# Thread channel types: announcement, public and private threads.
THREAD_TYPES = frozenset({10, 11, 12})


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
    replied_text: str | None = None
    replied_id: str | None = None
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
        replied_text=str(referenced.get("content") or "")
        if isinstance(referenced, Mapping)
        else None,
        replied_id=str(referenced["id"])
        if isinstance(referenced, Mapping) and "id" in referenced
        else None,
        thread_parent=thread_parent,
        bot_in_thread=bot_in_thread,
        attachments=tuple(
            attachment(a) for a in data.get("attachments") or () if isinstance(a, Mapping)
        ),
    )


def message_event_id(message_id: str | int) -> str:
    """A message's id in the ingress ledger."""
    return f"msg:{message_id}"


def inbound(facts: MessageFacts, *, bot_id: str) -> InboundMessage | None:
    """The message as an event, or None when the agent does not answer it."""
    if facts.author_is_bot or facts.webhook or facts.author_id == bot_id:
        return None
    if facts.type not in _PERSON_TYPES:
        return None
    mentioned = bot_id in facts.mentions or facts.replied_to_author == bot_id
    # Said to nobody in particular: answered only where a profile answers every message
    # (the gateway decides; Discord sends its text only with the Message Content intent).
    ambient = False
    if facts.guild_id is None:
        workspace, channel, thread = DM, facts.channel_id, None
    elif facts.thread_parent is not None:
        ambient = not (mentioned or facts.bot_in_thread)
        workspace, channel, thread = facts.guild_id, facts.thread_parent, facts.channel_id
    else:
        ambient = not mentioned
        workspace, channel, thread = facts.guild_id, facts.channel_id, None
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
        platform_event_id=message_event_id(facts.message_id),
        mentions=tuple(user_id(m) for m in facts.mentions),
        attachments=facts.attachments,
        reply_to=facts.message_id,
        quote=_quote(facts, bot_id),
        raw={"channel_id": facts.channel_id} | ({"ambient": True} if ambient else {}),
    )


def _quote(facts: MessageFacts, bot_id: str) -> Quote | None:
    """The message this one replies to, when Discord sent it along."""
    if not facts.replied_text or not facts.replied_text.strip() or facts.replied_to_author is None:
        return None
    author = "assistant" if facts.replied_to_author == bot_id else user_id(facts.replied_to_author)
    return Quote(text=facts.replied_text, author=author, message_id=facts.replied_id)


def deleted(*, guild_id: str | None, channel_id: str, message_id: str) -> MessageDeleted:
    """A message deleted in a channel (or a thread, named as its channel)."""
    return MessageDeleted(
        platform="discord",
        workspace=guild_id or DM,
        channel=channel_id,
        user="discord:?",
        message_id=message_id,
        platform_event_id=f"delete:{message_id}",
    )


def reaction(
    *,
    user: str,
    bot_id: str,
    guild_id: str | None,
    channel_id: str,
    message_id: str,
    emoji: str,
    added: bool,
    author_id: str | None = None,
) -> Reaction | None:
    """A reaction added or removed, as a rating (None for other emoji, the bot's own
    reaction, or a message someone else wrote). ``channel_id`` may be a thread: the
    gateway finds the message in the conversation that has it as channel or thread."""
    rating = rating_of(emoji)
    if rating is None or user == bot_id or (author_id is not None and author_id != bot_id):
        return None
    return Reaction(
        platform="discord",
        workspace=guild_id or DM,
        channel=channel_id,
        user=user_id(user),
        message_id=message_id,
        rating=rating,
        added=added,
        platform_event_id=f"react:{message_id}:{user}:{rating}:{'add' if added else 'remove'}",
        raw={"channel_id": channel_id},
    )


def parse_reaction(data: Mapping[str, Any], *, added: bool, bot_id: str) -> Reaction | None:
    """A ``MESSAGE_REACTION_ADD`` / ``MESSAGE_REACTION_REMOVE`` dispatch's data."""
    emoji = data.get("emoji")
    if not isinstance(emoji, Mapping) or not all(
        k in data for k in ("user_id", "channel_id", "message_id")
    ):
        raise BadRequest("a reaction needs 'user_id', 'channel_id', 'message_id' and 'emoji'")
    if emoji.get("id") is not None:
        return None  # a server's own emoji, whatever its name
    author = data.get("message_author_id")
    return reaction(
        user=str(data["user_id"]),
        bot_id=bot_id,
        guild_id=str(data["guild_id"]) if data.get("guild_id") else None,
        channel_id=str(data["channel_id"]),
        message_id=str(data["message_id"]),
        emoji=str(emoji.get("name") or ""),
        added=added,
        author_id=str(author) if author is not None else None,
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
    if action not in _KINDS[kind]:
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
        approval_id=target if kind == "ap" else _asked(target, action) if kind == "q" else None,
        action=_KINDS[kind][action],
        value=target.rpartition("_")[2] if kind == "q" and action == "answer" else target,
        message=MessageRef(conversation=key, message_id=message_id) if message_id else None,
        platform_event_id=f"int:{interaction_id}",
        raw={"channel_id": channel_id},
    )


def _asked(target: str, action: str) -> str:
    """The approval a question's button names (an option's target ends ``_INDEX``)."""
    return target.rpartition("_")[0] if action == "answer" else target


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
