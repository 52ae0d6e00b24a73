"""Telegram's updates to events (pure: update dicts in, events out, so recorded updates
test it). Identity:

- a conversation is (``telegram``, bot id, chat id, topic): a private chat or a group is
  one conversation; a forum topic is its own (``message_thread_id``);
- the ledger key of an update is ``{bot id}:{update_id}``: Telegram resends an update with
  the same id until a webhook answers 2xx or ``getUpdates`` confirms it, per bot;
- users are ``telegram:{user id}`` (the form ``CHATGATE_ADMINS`` uses).

In groups only messages addressed to the bot count: a mention, a reply to the bot, or a
command (``/jobs`` or ``/jobs@this_bot``); the rest are marked ``ambient`` and answered only
where a profile answers every message. Edits, other bots, service messages and membership
changes are ignored.

A ``message_reaction`` update (a person's reactions on a message changed: Telegram sends
the old and the new set) whose 👍 or 👎 came or went is a
:class:`~agent_core.events.Reaction`; it names the chat and message, not the topic, and
not who wrote the message (the gateway finds out whether it was the bot's). Telegram
sends these to a bot only where it is an administrator (and in private chats).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from adapters.base import BadRequest
from adapters.reactions import rating_of
from agent_core.events import (
    Attachment,
    ButtonAction,
    ButtonPress,
    ConversationKey,
    InboundMessage,
    MessageEdited,
    MessageRef,
    Quote,
    Rating,
    Reaction,
    edited,
)

# callback_data is at most 64 bytes: a two-letter verb, a colon and our id (``ap_`` + 12
# hex digits, or ``sc_`` + 8) leave plenty of room.
ACTIONS: dict[str, ButtonAction] = {"ap": "approve", "ac": "allow_conversation", "dn": "deny"}
JOB_ACTIONS: dict[str, ButtonAction] = {"jp": "pause", "jr": "resume", "jd": "delete"}
TURN_ACTIONS: dict[str, ButtonAction] = {"st": "stop"}
# Buttons that answer a question chatgate asked (``forget me``'s confirmation).
CHOICE_ACTIONS: dict[str, ButtonAction] = {"fg": "forget"}
# An ``ask_user`` question's buttons: ``qa:APPROVAL:INDEX`` and ``qo:APPROVAL`` (Other).
QUESTION_ACTIONS: dict[str, ButtonAction] = {"qa": "answer", "qo": "other"}
# What the gateway asks Telegram for (webhook and getUpdates alike).
ALLOWED_UPDATES = ("message", "edited_message", "callback_query", "message_reaction")


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is: its numeric id (the token's prefix) and its @username."""

    id: int
    username: str


def user_id(telegram_user: int | str) -> str:
    """Our name for a Telegram user."""
    return f"telegram:{telegram_user}"


def parse_update(
    update: Mapping[str, Any], *, bot: BotIdentity
) -> InboundMessage | ButtonPress | Reaction | MessageEdited | None:
    """An update as an event, or None when the agent does not answer it."""
    update_id = update.get("update_id")
    if not isinstance(update_id, int) or isinstance(update_id, bool):
        raise BadRequest("an update needs an integer 'update_id'")
    message = update.get("message")
    if isinstance(message, Mapping):
        return _message(update_id, message, bot)
    callback = update.get("callback_query")
    if isinstance(callback, Mapping):
        return _callback(update_id, callback, bot)
    reaction = update.get("message_reaction")
    if isinstance(reaction, Mapping):
        return _reaction(update_id, reaction, bot)
    changed = update.get("edited_message")
    if isinstance(changed, Mapping):
        now = _message(update_id, changed, bot)
        return None if now is None else edited(now, event_id=f"{bot.id}:{update_id}")
    return None  # my_chat_member, channel_post ...: nothing to answer


def _message(update_id: int, message: Mapping[str, Any], bot: BotIdentity) -> InboundMessage | None:
    chat = message.get("chat")
    sender = message.get("from")
    message_id = message.get("message_id")
    if not (isinstance(chat, Mapping) and isinstance(message_id, int)):
        raise BadRequest("a message needs 'chat' and 'message_id'")
    if not isinstance(sender, Mapping) or sender.get("is_bot") or "id" not in sender:
        return None  # another bot, ourselves, or a channel writing as itself
    text = message.get("text")
    entities = message.get("entities")
    if not isinstance(text, str):
        text = message.get("caption")
        entities = message.get("caption_entities")
    text = text if isinstance(text, str) else ""
    entities = [e for e in entities or () if isinstance(e, Mapping)]
    attachments = _attachments(message)
    if not text and not attachments:
        return None  # a service message: someone joined, a pinned message, a new title ...
    private = chat.get("type") == "private"
    command = _command(text, entities, bot)
    addressed = private or command is not None or _mentions(text, entities, bot)
    addressed = addressed or _replies_to_bot(message, bot)
    if not addressed and _starts_with_a_command(entities):
        return None  # a command for another bot
    text = command if command is not None else _without_mention(text, entities, bot)
    thread = message.get("message_thread_id") if message.get("is_topic_message") else None
    raw: dict[str, JsonValue] = {"update_id": update_id, "chat_type": str(chat.get("type", ""))}
    if not addressed:
        # A group's chatter: answered only where a profile answers every message (the
        # gateway decides; the bot gets these only with its privacy mode off).
        raw["ambient"] = True
    return InboundMessage(
        platform="telegram",
        workspace=str(bot.id),
        channel=str(chat["id"]),
        thread=str(thread) if thread is not None else None,
        user=user_id(sender["id"]),
        text=text.strip() or ("(attachment)" if attachments else "(empty message)"),
        platform_event_id=f"{bot.id}:{update_id}",
        attachments=attachments,
        reply_to=str(message_id),
        quote=_quote(message, bot),
        # Not addressed to the bot: a group's chatter, answered only where a profile
        # answers every message (the gateway decides; the bot sees it only with privacy
        # mode off).
        raw=raw,
    )


def _callback(update_id: int, callback: Mapping[str, Any], bot: BotIdentity) -> ButtonPress | None:
    sender = callback.get("from")
    query_id = callback.get("id")
    if not isinstance(sender, Mapping) or "id" not in sender or not isinstance(query_id, str):
        raise BadRequest("a callback_query needs 'id' and 'from'")
    verb, _, value = str(callback.get("data") or "").partition(":")
    action = (
        ACTIONS.get(verb)
        or JOB_ACTIONS.get(verb)
        or TURN_ACTIONS.get(verb)
        or CHOICE_ACTIONS.get(verb)
        or QUESTION_ACTIONS.get(verb)
    )
    message = callback.get("message")
    if action is None or not value or not isinstance(message, Mapping):
        return None  # not our button, or on a message too old to be shown
    chat = message.get("chat")
    if not isinstance(chat, Mapping) or "id" not in chat:
        return None
    thread = message.get("message_thread_id") if message.get("is_topic_message") else None
    key = ConversationKey(
        platform="telegram",
        workspace=str(bot.id),
        channel=str(chat["id"]),
        thread=str(thread) if thread is not None else None,
    )
    return ButtonPress(
        platform="telegram",
        workspace=key.workspace,
        channel=key.channel,
        thread=key.thread,
        user=user_id(sender["id"]),
        approval_id=value.partition(":")[0]
        if verb in ACTIONS or verb in QUESTION_ACTIONS
        else None,
        action=action,
        value=value.partition(":")[2] if verb in QUESTION_ACTIONS else value,
        message=MessageRef(conversation=key, message_id=str(message.get("message_id"))),
        platform_event_id=f"{bot.id}:{update_id}",
        raw={"callback_query_id": query_id},
    )


def _reaction(update_id: int, change: Mapping[str, Any], bot: BotIdentity) -> Reaction | None:
    """A 👍 or 👎 that came (the newest such in the new set wins) or went; None when neither
    changed, or when nobody in particular reacted (an anonymous admin, a channel)."""
    chat = change.get("chat")
    message_id = change.get("message_id")
    if not (isinstance(chat, Mapping) and "id" in chat and isinstance(message_id, int)):
        raise BadRequest("a message_reaction needs 'chat' and 'message_id'")
    sender = change.get("user")
    if not isinstance(sender, Mapping) or sender.get("is_bot") or "id" not in sender:
        return None
    now = _ratings(change.get("new_reaction"))
    before = _ratings(change.get("old_reaction"))
    if now:
        rating, added = now[-1], True
    elif before:
        rating, added = before[-1], False
    else:
        return None
    return Reaction(
        platform="telegram",
        workspace=str(bot.id),
        channel=str(chat["id"]),
        user=user_id(sender["id"]),
        message_id=str(message_id),
        rating=rating,
        added=added,
        platform_event_id=f"{bot.id}:{update_id}",
        raw={"update_id": update_id},
    )


def _ratings(reactions: object) -> list[Rating]:
    """The ratings among a set of reaction types (only emoji ones rate)."""
    if not isinstance(reactions, list):
        return []
    found = [
        rating_of(str(r.get("emoji") or ""))
        for r in reactions
        if isinstance(r, Mapping) and r.get("type") == "emoji"
    ]
    return [rating for rating in found if rating is not None]


def _entity_text(text: str, entity: Mapping[str, Any]) -> str:
    """An entity's text: offsets count UTF-16 code units, not Python characters."""
    encoded = text.encode("utf-16-le")
    start, length = int(entity.get("offset", 0)), int(entity.get("length", 0))
    return encoded[2 * start : 2 * (start + length)].decode("utf-16-le", errors="replace")


def _mentions(text: str, entities: Sequence[Mapping[str, Any]], bot: BotIdentity) -> bool:
    for entity in entities:
        if entity.get("type") == "mention":
            if _entity_text(text, entity).lower() == f"@{bot.username.lower()}":
                return True
        elif entity.get("type") == "text_mention":
            user = entity.get("user")
            if isinstance(user, Mapping) and user.get("id") == bot.id:
                return True
    return False


def _command(text: str, entities: Sequence[Mapping[str, Any]], bot: BotIdentity) -> str | None:
    """``/name@this_bot args`` as ``/name args``; None when the text is not a command (or
    one addressed to another bot)."""
    first = next((e for e in entities if e.get("type") == "bot_command"), None)
    if first is None or first.get("offset") != 0:
        return None
    word = _entity_text(text, first)
    name, _, addressee = word.partition("@")
    if addressee and addressee.lower() != bot.username.lower():
        return None
    rest = text[len(word) :]
    if name == "/start":
        return "/help" + rest
    return name + rest


def _starts_with_a_command(entities: Sequence[Mapping[str, Any]]) -> bool:
    return any(e.get("type") == "bot_command" and e.get("offset") == 0 for e in entities)


def _replies_to_bot(message: Mapping[str, Any], bot: BotIdentity) -> bool:
    replied = message.get("reply_to_message")
    if not isinstance(replied, Mapping) or replied.get("forum_topic_created"):
        # In a forum, a topic's messages "reply" to the topic's first message.
        return False
    author = replied.get("from")
    return isinstance(author, Mapping) and author.get("id") == bot.id


def _quote(message: Mapping[str, Any], bot: BotIdentity) -> Quote | None:
    """The message this one replies to (the part it quotes, when it quotes a part)."""
    replied = message.get("reply_to_message")
    if not isinstance(replied, Mapping) or replied.get("forum_topic_created"):
        return None
    quoted = message.get("quote")
    text = quoted.get("text") if isinstance(quoted, Mapping) else None
    if not isinstance(text, str):
        text = (
            replied.get("text") if isinstance(replied.get("text"), str) else replied.get("caption")
        )
    author = replied.get("from")
    if not isinstance(text, str) or not text.strip() or not isinstance(author, Mapping):
        return None
    who = "assistant" if author.get("id") == bot.id else user_id(author.get("id", "?"))
    return Quote(text=text, author=who, message_id=str(replied.get("message_id", "")) or None)


def _without_mention(text: str, entities: Sequence[Mapping[str, Any]], bot: BotIdentity) -> str:
    handle = f"@{bot.username}"
    stripped = text.lstrip()
    if stripped.lower().startswith(handle.lower()):
        return stripped[len(handle) :].lstrip(" ,:")
    return text


def _attachments(message: Mapping[str, Any]) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    photos = [p for p in message.get("photo") or () if isinstance(p, Mapping)]
    if photos:
        largest = max(photos, key=lambda p: int(p.get("width", 0)) * int(p.get("height", 0)))
        found.append(
            Attachment(
                name="photo.jpg",
                mime_type="image/jpeg",
                size=largest.get("file_size")
                if isinstance(largest.get("file_size"), int)
                else None,
                platform_file_id=str(largest.get("file_id")),
            )
        )
    for field, default in (
        ("document", "document"),
        ("audio", "audio"),
        ("video", "video"),
        ("voice", "voice.ogg"),
    ):
        item = message.get(field)
        if isinstance(item, Mapping) and item.get("file_id"):
            found.append(
                Attachment(
                    name=str(item.get("file_name") or default),
                    mime_type=str(item["mime_type"]) if item.get("mime_type") else None,
                    size=_size(item),
                    platform_file_id=str(item["file_id"]),
                )
            )
    return tuple(found)


def _size(item: Mapping[str, Any]) -> int | None:
    size = item.get("file_size")
    return size if isinstance(size, int) else None
