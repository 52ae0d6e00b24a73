"""Telegram: Bot API updates to events, replies and prompts to Telegram (python-telegram-bot).

Parsing is pure (update dicts in, events out) so recorded updates test it. Identity:

- a conversation is (``telegram``, bot id, chat id, topic): a private chat or a group is
  one conversation; a forum topic is its own (``message_thread_id``);
- the ledger key of an update is ``{bot id}:{update_id}``: Telegram resends an update with
  the same id until a webhook answers 2xx or ``getUpdates`` confirms it, per bot;
- users are ``telegram:{user id}`` (the form ``CHATGATE_ADMINS`` uses).

In groups only messages addressed to the bot count: a mention, a reply to the bot, or a
command (``/jobs`` or ``/jobs@this_bot``). Edits, other bots, service messages and
membership changes are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from adapters.base import BadRequest
from adapters.chunking import TELEGRAM_LIMIT, split_message
from adapters.markdown import to_telegram_html
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
    from telegram import Bot, InlineKeyboardMarkup

# callback_data is at most 64 bytes: a two-letter verb, a colon and our id (``ap_`` + 12
# hex digits, or ``sc_`` + 8) leave plenty of room.
ACTIONS = {"ap": "approve", "ac": "allow_conversation", "dn": "deny"}
JOB_ACTIONS = {"jp": "pause", "jr": "resume", "jd": "delete"}
BUTTONS = (("ap", "Approve"), ("ac", "Allow in this conversation"), ("dn", "Deny"))
_JOB_BUTTONS = {
    "active": (("jp", "Pause"), ("jd", "Delete")),
    "paused": (("jr", "Resume"), ("jd", "Delete")),
    "done": (("jd", "Delete"),),
}
MAX_CALLBACK_DATA = 64
# An answerCallbackQuery text is at most 200 characters.
_ALERT_LIMIT = 200
# What the gateway asks Telegram for (webhook and getUpdates alike).
ALLOWED_UPDATES = ("message", "callback_query")
_MAX_JOBS = 20
_FILE_FIELDS = (
    ("document", "document"),
    ("audio", "audio"),
    ("video", "video"),
    ("voice", "voice"),
)


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
) -> InboundMessage | ButtonPress | None:
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
    return None  # edited_message, my_chat_member, channel_post ...: nothing to answer


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
    if not addressed and not _replies_to_bot(message, bot):
        return None
    text = command if command is not None else _without_mention(text, entities, bot)
    thread = message.get("message_thread_id") if message.get("is_topic_message") else None
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
        raw={"update_id": update_id, "chat_type": str(chat.get("type", ""))},
    )


def _callback(update_id: int, callback: Mapping[str, Any], bot: BotIdentity) -> ButtonPress | None:
    sender = callback.get("from")
    query_id = callback.get("id")
    if not isinstance(sender, Mapping) or "id" not in sender or not isinstance(query_id, str):
        raise BadRequest("a callback_query needs 'id' and 'from'")
    verb, _, value = str(callback.get("data") or "").partition(":")
    action = ACTIONS.get(verb) or JOB_ACTIONS.get(verb)
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
        approval_id=value if verb in ACTIONS else None,
        action=action,
        value=value,
        message=MessageRef(conversation=key, message_id=str(message.get("message_id"))),
        platform_event_id=f"{bot.id}:{update_id}",
        raw={"callback_query_id": query_id},
    )


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


def _replies_to_bot(message: Mapping[str, Any], bot: BotIdentity) -> bool:
    replied = message.get("reply_to_message")
    if not isinstance(replied, Mapping) or replied.get("forum_topic_created"):
        # In a forum, a topic's messages "reply" to the topic's first message.
        return False
    author = replied.get("from")
    return isinstance(author, Mapping) and author.get("id") == bot.id


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


def callback_data(verb: str, value: str) -> str:
    """A button's callback data, checked against Telegram's 64-byte limit (which PTB does
    not check: Telegram would answer ``BUTTON_DATA_INVALID``)."""
    data = f"{verb}:{value}"
    if len(data.encode()) > MAX_CALLBACK_DATA:
        raise ValueError(f"callback data over {MAX_CALLBACK_DATA} bytes: {data!r}")
    return data


def approval_text(prompt: ApprovalPrompt) -> str:
    """The prompt's words (HTML): what would run, with which arguments."""
    from html import escape

    shown = for_prompt(prompt.arguments)
    warning = f"\n⚠ {escape(shown.warning)}" if shown.warning else ""
    return (
        f"<b>Allow {escape(prompt.tool)}?</b> "
        f"(approval <code>{escape(prompt.approval_id)}</code>){warning}\n"
        f"<pre>{escape(shown.text)}</pre>"
    )


def approval_keyboard(prompt: ApprovalPrompt) -> InlineKeyboardMarkup:
    """The three buttons, the approval id in each button's callback data."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    buttons = [
        InlineKeyboardButton(label, callback_data=callback_data(verb, prompt.approval_id))
        for verb, label in BUTTONS
    ]
    return InlineKeyboardMarkup([buttons[:2], buttons[2:]])


def jobs_keyboard(jobs: Sequence[Mapping[str, Any]]) -> InlineKeyboardMarkup | None:
    """One row per schedule: pause or resume, and delete."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup

    rows = []
    for job in jobs[:_MAX_JOBS]:
        schedule_id = str(job.get("id", ""))
        buttons = _JOB_BUTTONS.get(str(job.get("status")), ())
        if schedule_id and buttons:
            rows.append(
                [
                    InlineKeyboardButton(
                        f"{label} {schedule_id}", callback_data=callback_data(verb, schedule_id)
                    )
                    for verb, label in buttons
                ]
            )
    return InlineKeyboardMarkup(rows) if rows else None


def _payload_keyboard(payload: Mapping[str, Any] | None) -> InlineKeyboardMarkup | None:
    jobs = (payload or {}).get("jobs")
    if not isinstance(jobs, list):
        return None
    return jobs_keyboard([j for j in jobs if isinstance(j, Mapping)])


def retry_seconds(error: Any) -> float:
    """``RetryAfter``'s wait in seconds (PTB 22 gives an int or a timedelta)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = error.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class TelegramSender:
    """The send-only client over PTB's ``Bot``: replies, prompts, edits, callback answers.

    A 429 (``RetryAfter``) is waited out inside the one call that got it: other chats'
    messages keep going meanwhile (PTB's ``AIORateLimiter`` would pause every chat).
    """

    def __init__(self, token: str, *, base_url: str, max_retries: int = 3) -> None:
        from telegram import Bot
        from telegram.request import HTTPXRequest

        self.bot: Bot = Bot(
            token,
            base_url=base_url,
            base_file_url=base_url.replace("/bot", "/file/bot", 1),
            request=HTTPXRequest(connection_pool_size=64),
            get_updates_request=HTTPXRequest(connection_pool_size=2, read_timeout=40),
        )
        self._max_retries = max_retries
        self._identity: BotIdentity | None = None

    async def open(self) -> None:
        """Nothing to open: the HTTP client connects on first use."""

    async def identify(self) -> BotIdentity:
        """``getMe``: who the bot is (its username decides what counts as a mention)."""
        if self._identity is None:
            await self.bot.initialize()
            self._identity = BotIdentity(id=self.bot.id, username=self.bot.username)
        return self._identity

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self.bot.shutdown()

    async def _call(self, method: str, **kwargs: Any) -> Any:
        from telegram.error import RetryAfter, TelegramError

        for attempt in range(self._max_retries + 1):
            try:
                return await getattr(self.bot, method)(**kwargs)
            except RetryAfter as exc:
                if attempt == self._max_retries:
                    raise DeliveryError(f"telegram: {exc}") from exc
                await asyncio.sleep(retry_seconds(exc))
            except TelegramError as exc:
                raise DeliveryError(f"telegram: {exc}") from exc
        raise AssertionError("unreachable")

    async def send(self, reply: Reply | ApprovalPrompt) -> str:
        """Send to the chat (in the topic, as a reply to the triggering message); long text
        goes in several messages. The receipt is the first message's id."""
        from telegram import ReplyParameters

        conversation = reply.conversation
        where: dict[str, Any] = {
            "chat_id": int(conversation.channel),
            "message_thread_id": int(conversation.thread) if conversation.thread else None,
            "reply_parameters": (
                ReplyParameters(message_id=int(reply.reply_to), allow_sending_without_reply=True)
                if reply.reply_to and reply.reply_to.isdigit()
                else None
            ),
            "parse_mode": "HTML",
            "link_preview_options": None,
        }
        if isinstance(reply, ApprovalPrompt):
            sent = await self._call(
                "send_message",
                text=approval_text(reply),
                reply_markup=approval_keyboard(reply),
                **where,
            )
            return str(sent.message_id)
        jobs = (reply.payload or {}).get("jobs")
        keyboard = (
            jobs_keyboard([j for j in jobs if isinstance(j, dict)])
            if isinstance(jobs, list)
            else None
        )
        receipts: list[str] = []
        chunks = split_message(to_telegram_html(reply.text), TELEGRAM_LIMIT, markup="html")
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            sent = await self._call(
                "send_message", text=chunk, reply_markup=keyboard if last else None, **where
            )
            receipts.append(str(sent.message_id))
        return receipts[0]

    async def edit(self, edit: Edit) -> None:
        """Replace a message's text (a decided prompt loses its buttons; a ``jobs`` listing
        is redrawn with its buttons)."""
        from telegram.error import BadRequest as TelegramBadRequest

        jobs = (edit.payload or {}).get("jobs")
        keyboard = (
            jobs_keyboard([j for j in jobs if isinstance(j, dict)])
            if isinstance(jobs, list)
            else None
        )
        text = split_message(to_telegram_html(edit.text), TELEGRAM_LIMIT, markup="html")[0]
        try:
            await self._call(
                "edit_message_text",
                chat_id=int(edit.message.conversation.channel),
                message_id=int(edit.message.message_id),
                text=text,
                parse_mode="HTML",
                reply_markup=keyboard,
            )
        except DeliveryError as exc:
            cause = exc.__cause__
            if isinstance(cause, TelegramBadRequest) and "not modified" in str(cause).lower():
                return  # the same text again (a redrawn listing that did not change)
            raise

    async def answer(
        self, callback_query_id: str, text: str | None = None, *, alert: bool = False
    ) -> None:
        """Stop the button's spinner; ``alert`` shows ``text`` to the presser only."""
        from telegram.error import TelegramError

        # A query older than Telegram keeps (about 15 minutes), or answered already, fails.
        with contextlib.suppress(TelegramError):
            await self.bot.answer_callback_query(
                callback_query_id,
                text=text[:_ALERT_LIMIT] if text else None,
                show_alert=alert,
            )
