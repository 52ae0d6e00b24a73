"""The outbound client over python-telegram-bot's ``Bot``: replies, prompts, edits and
callback answers; Telegram's errors become ``DeliveryError`` in one place (``_call``)."""

from __future__ import annotations

import asyncio
import contextlib
import html
import warnings
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from adapters.chunking import TELEGRAM_LIMIT, split_message
from adapters.downloads import check_host, download, host_of
from adapters.markdown import to_telegram_html
from adapters.telegram.parse import BotIdentity
from adapters.telegram.render import (
    approval_keyboard,
    approval_text,
    choices_keyboard,
    jobs_keyboard,
    stop_keyboard,
)
from agent_core.delivery import ChunkSent
from agent_core.errors import DeliveryError
from agent_core.events import ApprovalPrompt, ConversationKey, Edit, OutgoingFile, Reply
from agent_core.faults import FaultPoints
from agent_core.files.fetching import FileUnavailable
from agent_core.journaled import Choices, JobsListing
from agent_core.records import AttachmentRecord, TurnState

if TYPE_CHECKING:
    import aiohttp
    from telegram import Bot, InlineKeyboardMarkup

# The reaction a turn's state shows on the message that opened it (from the emoji Telegram
# lets a bot react with).
REACTIONS: dict[TurnState, str] = {
    "received": "👀",
    "working": "✍",
    "waiting": "🙏",
    "done": "👌",
    "failed": "😢",
}
# A photo (``sendPhoto``) is at most 10 MB; a caption at most 1,024 characters.
PHOTO_LIMIT = 10 * 1024 * 1024
CAPTION_LIMIT = 1024
# The largest file the Bot API lets a bot download (``getFile``).
BOT_API_FILE_LIMIT = 20 * 1024 * 1024
# An answerCallbackQuery text is at most 200 characters.
_ALERT_LIMIT = 200


def _listing_keyboard(payload: Mapping[str, Any] | None) -> InlineKeyboardMarkup | None:
    """A ``jobs`` listing's buttons, or a question's, when the payload holds one."""
    listing = JobsListing.from_payload(payload)
    if listing is not None:
        return jobs_keyboard(listing.jobs)
    choices = Choices.from_payload(payload)
    return choices_keyboard(choices.choices) if choices is not None else None


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

    def __init__(
        self,
        token: str,
        *,
        base_url: str,
        max_retries: int = 3,
        faults: FaultPoints | None = None,
    ) -> None:
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
        self._files: aiohttp.ClientSession | None = None  # file downloads (``fetch``)
        self._identity: BotIdentity | None = None
        self._faults = faults or FaultPoints()

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
        if self._files is not None:
            await self._files.close()
            self._files = None

    async def send_file(self, file: OutgoingFile) -> str:
        """``sendPhoto`` for a picture Telegram shows inline (JPEG, PNG), else
        ``sendDocument``, the caption with it. The Bot API cannot read a chat back: a file
        sent just before a crash cannot be told from one not sent (``send_file`` asks,
        on Telegram, before sending again)."""
        from telegram import InputFile

        thread = file.conversation.thread
        where = {
            "chat_id": int(file.conversation.channel),
            "message_thread_id": int(thread) if thread else None,
        }
        upload = InputFile(file.data, filename=file.name)
        caption = (file.caption or "")[:CAPTION_LIMIT] or None
        if file.content_type in ("image/jpeg", "image/png") and len(file.data) <= PHOTO_LIMIT:
            sent = await self._call("send_photo", photo=upload, caption=caption, **where)
        else:
            sent = await self._call("send_document", document=upload, caption=caption, **where)
        return str(sent.message_id)

    async def fetch(self, file: AttachmentRecord, *, limit: int) -> AsyncIterator[bytes]:
        """A photo, document, voice note ... (``getFile``, then its download link). The
        Bot API gives bots files up to 20 MB."""
        import aiohttp

        if file.declared_size is not None and file.declared_size > BOT_API_FILE_LIMIT:
            raise FileUnavailable("Telegram gives bots files up to 20 MB")
        if not file.platform_file_id:
            raise FileUnavailable("Telegram gave no file id")
        found = await self._call("get_file", file_id=file.platform_file_id)
        url = str(found.file_path or "")
        check_host(url, (host_of(self.bot.base_file_url),), platform="Telegram")
        if self._files is None:
            self._files = aiohttp.ClientSession()
        async for chunk in download(self._files, url, platform="Telegram"):
            yield chunk

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

    async def send(
        self, reply: Reply | ApprovalPrompt, *, progress: ChunkSent | None = None
    ) -> str:
        """Send to the chat (in the topic, as a reply to the triggering message); long text
        goes in several messages. The receipt is the first message's id.

        The Bot API has no idempotency key and no way to read a chat back, so a resend
        cannot find what an earlier attempt sent. What it can do: each chunk of a long
        reply is reported to ``progress`` (journaled) as Telegram accepts it, and a resend
        starts after ``reply.delivered``; a crash can repeat at most the one chunk
        Telegram accepted and the journal did not hear of yet."""

        where = _where(reply.conversation, reply.reply_to)
        if isinstance(reply, ApprovalPrompt):
            sent = await self._call(
                "send_message",
                text=approval_text(reply),
                reply_markup=approval_keyboard(reply),
                **where,
            )
            return str(sent.message_id)
        keyboard = _listing_keyboard(reply.payload)
        chunks = split_message(to_telegram_html(reply.text), TELEGRAM_LIMIT, markup="html")
        receipts = list(reply.delivered[: len(chunks)])
        live = reply.live_message
        if live is not None and not receipts:
            single = len(chunks) == 1
            if await self._finish(where, live, chunks[0], keyboard if single else None):
                receipts.append(live)
                if not single and progress is not None:
                    await progress(0, live)
        for index in range(len(receipts), len(chunks)):
            last = index == len(chunks) - 1
            sent = await self._call(
                "send_message",
                text=chunks[index],
                reply_markup=keyboard if last else None,
                **where,
            )
            receipts.append(str(sent.message_id))
            if not last:
                if progress is not None:
                    await progress(index, receipts[-1])
                self._faults.hit("after_chunk_sent")
        return receipts[0]

    async def _finish(self, where: dict[str, Any], message: str, text: str, keyboard: Any) -> bool:
        """Put the reply's first chunk into the message it was shown in; False when that
        message is gone (deleted meanwhile), so the reply is posted afresh."""
        try:
            await self._edit_text(
                chat_id=where["chat_id"],
                message_id=int(message),
                text=text,
                parse_mode="HTML",
                reply_markup=keyboard,
            )
        except DeliveryError as exc:
            if "not found" in str(exc.__cause__).lower():
                return False
            raise
        return True

    async def _edit_text(self, **arguments: Any) -> None:
        """``editMessageText``; the same text again is no error."""
        from telegram.error import BadRequest as TelegramBadRequest

        try:
            await self._call("edit_message_text", **arguments)
        except DeliveryError as exc:
            cause = exc.__cause__
            if isinstance(cause, TelegramBadRequest) and "not modified" in str(cause).lower():
                return
            raise

    async def session(
        self, conversation: ConversationKey, state: TurnState, *, title: str, user: str
    ) -> None:
        """Nothing: no session status here (marks and the Stop button say it)."""

    async def direct(self, user: str, *, workspace: str) -> ConversationKey | None:
        """A person's private chat with the bot has their user id as its chat id (it
        takes messages once they have started the bot)."""
        bare = user.removeprefix("telegram:")
        if bare == user or not bare.isdigit():
            return None
        return ConversationKey(platform="telegram", workspace=workspace, channel=bare)

    async def mark(
        self,
        conversation: ConversationKey,
        message_id: str,
        state: TurnState,
        *,
        previous: TurnState | None,
    ) -> None:
        """The bot's reaction on the message (one at a time: each replaces the last), and
        "typing…" while the turn works (it lasts five seconds: the turn marks again)."""
        chat = int(conversation.channel)
        if state == "working":
            thread = int(conversation.thread) if conversation.thread else None
            await self._call(
                "send_chat_action", chat_id=chat, action="typing", message_thread_id=thread
            )
        if state != previous:
            await self._call(
                "set_message_reaction",
                chat_id=chat,
                message_id=int(message_id),
                reaction=REACTIONS[state],
            )

    def live(
        self,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
        user: str,
    ) -> TelegramDraft | TelegramLiveMessage:
        """A draft in a private chat (``sendMessageDraft``: a preview, no message; the reply
        is then sent as any other), one message edited as it grows in a group."""
        if int(conversation.channel) > 0:
            return TelegramDraft(self, conversation, key=key)
        return TelegramLiveMessage(self, conversation, key=key, message=message, reply_to=reply_to)

    async def edit(self, edit: Edit) -> None:
        """Replace a message's text (a decided prompt loses its buttons; a ``jobs`` listing
        is redrawn with its buttons)."""

        keyboard = _listing_keyboard(edit.payload)
        text = split_message(to_telegram_html(edit.text), TELEGRAM_LIMIT, markup="html")[0]
        # The same text again is a redrawn listing that did not change.
        await self._edit_text(
            chat_id=int(edit.message.conversation.channel),
            message_id=int(edit.message.message_id),
            text=text,
            parse_mode="HTML",
            reply_markup=keyboard,
        )

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


def _where(conversation: ConversationKey, reply_to: str | None) -> dict[str, Any]:
    """Where a message goes: the chat, its topic, a reply to the triggering message."""
    from telegram import ReplyParameters

    return {
        "chat_id": int(conversation.channel),
        "message_thread_id": int(conversation.thread) if conversation.thread else None,
        "reply_parameters": (
            ReplyParameters(message_id=int(reply_to), allow_sending_without_reply=True)
            if reply_to and reply_to.isdigit()
            else None
        ),
        "parse_mode": "HTML",
        "link_preview_options": None,
    }


def _draft(text: str, status: str | None) -> str:
    """What an update shows, in Telegram's HTML: the text so far (a message's worth) and
    the status in italics under it."""
    shown = (
        split_message(to_telegram_html(text), TELEGRAM_LIMIT - 200, markup="html")[0]
        if text.strip()
        else ""
    )
    line = f"<i>{html.escape(status)}</i>" if status else ("" if shown else "…")
    return "\n\n".join(part for part in (shown, line) if part)


class TelegramDraft:
    """A reply shown as it is written in a private chat: ``sendMessageDraft``, an animated
    preview that lasts 30 s unless renewed, and no message; the reply is then sent as any
    other, and is what stays. Its id comes from the turn, so a resumed turn goes on in the
    same draft."""

    interval = 1.0
    message = None
    posts = False

    async def recover(self) -> None:
        """Nothing was posted."""

    def __init__(self, sender: TelegramSender, conversation: ConversationKey, *, key: str) -> None:
        self._sender = sender
        self._conversation = conversation
        # Non-zero, and the same for every attempt at the turn.
        self._draft_id = int(key) % 2_000_000_000 + 1 if key.isdigit() else 1

    async def show(self, text: str, *, status: str | None) -> None:
        """Send the draft with the text so far."""
        thread = self._conversation.thread
        await self._sender._call(
            "send_message_draft",
            chat_id=int(self._conversation.channel),
            draft_id=self._draft_id,
            text=_draft(text, status),
            message_thread_id=int(thread) if thread else None,
            parse_mode="HTML",
        )

    async def close(self) -> None:
        """Nothing to end: the draft gives way to the reply when it is sent."""


class TelegramLiveMessage:
    """A reply shown as it is written in a group: one message, sent by the first update
    and edited after, with a Stop button that stops the turn (the reply, delivered into
    the message, takes the button off). A group takes 20 messages a minute from a bot:
    one update every 3 s at most. A 429 is waited out inside the call
    (``TelegramSender._call``)."""

    interval = 3.0
    posts = True

    def __init__(
        self,
        sender: TelegramSender,
        conversation: ConversationKey,
        *,
        key: str,
        message: str | None,
        reply_to: str | None,
    ) -> None:
        self._sender = sender
        self._conversation = conversation
        self._reply_to = reply_to
        self._stop = stop_keyboard(key)
        self.message = message

    async def show(self, text: str, *, status: str | None) -> None:
        """Send or edit the message with the text so far."""
        where = _where(self._conversation, self._reply_to)
        if self.message is None:
            sent = await self._sender._call(
                "send_message", text=_draft(text, status), reply_markup=self._stop, **where
            )
            self.message = str(sent.message_id)
            return
        await self._sender._edit_text(
            chat_id=where["chat_id"],
            message_id=int(self.message),
            text=_draft(text, status),
            parse_mode="HTML",
            reply_markup=self._stop,
        )

    async def recover(self) -> None:
        """The Bot API cannot read a chat back: a message an earlier attempt posted and
        did not journal is not found, and the reply posts another (the window README's
        Telegram section describes for replies)."""

    async def close(self) -> None:
        """Nothing to end: the reply is delivered into the message."""
