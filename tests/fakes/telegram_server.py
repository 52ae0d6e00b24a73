"""A fake Telegram Bot API on 127.0.0.1 (``TELEGRAM_API_URL``) for the real python-telegram-bot.

``POST /bot{token}/{method}`` answers what chatgate calls (``getMe``, ``sendMessage``,
``sendMessageDraft``, ``editMessageText``, ``answerCallbackQuery``, ``getUpdates``, the
webhook methods) and
records every call. Like Telegram it:

- rejects text with ``parse_mode=HTML`` that Telegram would not parse (unknown or unclosed
  tags, unknown ``&entities;``, a bare ``<`` or ``&``) and text over 4,096 characters after
  parsing, with ``400 Bad Request: can't parse entities``;
- keeps updates until ``getUpdates`` is called with a higher ``offset`` (long polling holds
  the request open up to ``timeout``);
- can answer one chat's ``sendMessage`` with 429 and ``parameters.retry_after``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from html.parser import HTMLParser
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackServer

TOKEN = "123456789:AAEtestTokenForChatgateOnly_0123456789"
BOT_ID = 123456789
BOT_USERNAME = "chatgate_test_bot"
WEBHOOK_SECRET = "s3cret-Token_for-tests"
# Update kinds Telegram sends only to a poller that names them in ``allowed_updates``.
_OPT_IN = frozenset({"message_reaction", "message_reaction_count", "chat_member"})
_TAGS = {
    "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a",
    "code", "pre", "blockquote", "tg-emoji",
}  # fmt: skip
_ENTITY = re.compile(r"&(#\d+|#x[0-9a-fA-F]+|lt|gt|amp|quot);")


class _TelegramHtml(HTMLParser):
    """Telegram's HTML rules, strictly: what it does not accept raises ValueError."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.open: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _TAGS:
            raise ValueError(f'Unsupported start tag "{tag}"')
        if tag == "a" and not dict(attrs).get("href"):
            raise ValueError("Can't find end of the entity: a tag without href")
        self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            raise ValueError(f'Can\'t find end tag corresponding to start tag "{tag}"')
        self.open.pop()

    def handle_data(self, data: str) -> None:
        if "<" in data or "&" in data:
            raise ValueError("Unsupported start tag or entity in text")
        self.text.append(data)

    def handle_entityref(self, name: str) -> None:
        if name not in ("lt", "gt", "amp", "quot"):
            raise ValueError(f"Unknown entity &{name};")
        self.text.append({"lt": "<", "gt": ">", "amp": "&", "quot": '"'}[name])

    def handle_charref(self, name: str) -> None:
        self.text.append("?")


def parse_html(text: str) -> str:
    """The text Telegram would show for ``text`` in HTML mode; ValueError when it would
    refuse it."""
    for amp in re.finditer("&", text):
        if not _ENTITY.match(text, amp.start()):
            raise ValueError("Unknown or unterminated entity")
    parser = _TelegramHtml()
    parser.feed(text)
    parser.close()
    if parser.open:
        raise ValueError(f'Can\'t find end tag corresponding to start tag "{parser.open[-1]}"')
    if parser.rawdata:
        raise ValueError("Unclosed start tag")
    return "".join(parser.text)


class FakeTelegram(LoopbackServer):
    """The server; use as a context manager. ``calls`` holds (method, arguments)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        # Every message sendMessage accepted, in order (rate-limited attempts are not).
        self.delivered: list[dict[str, Any]] = []
        # The command menus set (``setMyCommands``), by scope type ("default" without one).
        self.command_menus: dict[str, list[dict[str, str]]] = {}
        self.webhook: dict[str, Any] = {"url": "", "has_custom_certificate": False}
        # chat id -> (429s still to answer, retry_after seconds)
        self.rate_limited: dict[int, list[int]] = {}
        self._updates: list[dict[str, Any]] = []
        self._confirmed = 0
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(500)
        self._arrived: asyncio.Event | None = None
        self._closing = False
        self._polling = False
        self.conflicts = 0
        # Files the bot sent (sendPhoto, sendDocument): kind, chat_id, filename, data.
        self.sent_files: list[dict[str, Any]] = []
        # Files people sent, by file_id: (path under /file/bot<token>/, size).
        self.files: dict[str, tuple[str, int]] = {}
        # The bot's reaction on each message, by (chat id, message id).
        self.reactions: dict[tuple[int, int], list[str]] = {}

    @property
    def api_url(self) -> str:
        """The Bot API base for ``TELEGRAM_API_URL``."""
        return f"http://127.0.0.1:{self.port}/bot"

    def settings(self, *, webhook: bool = True) -> dict[str, str]:
        """The chatgate settings pointing Telegram at this server (polling when not
        ``webhook``)."""
        found = {"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_URL": self.api_url}
        if webhook:
            found["TELEGRAM_WEBHOOK_SECRET"] = WEBHOOK_SECRET
        return found

    def queue_update(self, update: dict[str, Any]) -> int:
        """Make an update available to ``getUpdates`` (``update_id`` assigned when absent)."""
        update = {"update_id": next(self._update_ids), **update}
        with self._lock:
            self._updates.append(update)
        if self._arrived is not None:
            self._loop.call_soon_threadsafe(self._arrived.set)
        return int(update["update_id"])

    def clear_updates(self) -> None:
        """Forget every queued update (as if the webhook got them all)."""
        with self._lock:
            self._updates.clear()

    def limit_chat(self, chat_id: int, *, times: int, retry_after: int) -> None:
        """Answer the next ``times`` sendMessage calls to ``chat_id`` with 429."""
        self.rate_limited[chat_id] = [times, retry_after]

    def routes(self, app: web.Application) -> None:
        """``/bot{token}/{method}``, any HTTP method, like the Bot API."""
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.*}", self._hosted)

    def add_file(self, data: bytes | int, *, path: str = "documents/file.bin") -> str:
        """Hold a file a person sent (``getFile`` finds it); its file_id."""
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = (path, data if isinstance(data, int) else len(data))
        self.host_file(f"/file/bot{TOKEN}/{path}", data)
        return file_id

    async def _getFile(self, arguments: dict[str, Any]) -> Any:
        found = self.files.get(str(arguments.get("file_id")))
        if found is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        path, size = found
        file_id = str(arguments["file_id"])
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": size,
                "file_path": path}  # fmt: skip

    async def started(self) -> None:
        """Long polls wait on this event."""
        self._arrived = asyncio.Event()

    async def stopping(self) -> None:
        """Answer the long polls now."""
        self._closing = True
        if self._arrived is not None:
            self._arrived.set()

    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != TOKEN:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        arguments = await _arguments(request)
        self.record(method, arguments)
        handler = getattr(self, f"_{method}", None)
        if handler is None:
            return _error(404, "Not Found: method not found")
        try:
            result = await handler(arguments)
        except _ApiError as exc:
            return _error(exc.code, exc.description, exc.parameters)
        return web.json_response({"ok": True, "result": result})

    async def _getMe(self, arguments: dict[str, Any]) -> Any:
        return {
            "id": BOT_ID,
            "is_bot": True,
            "first_name": "chatgate",
            "username": BOT_USERNAME,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    async def _sendPhoto(self, arguments: dict[str, Any]) -> Any:
        return self._file_message(arguments, "photo")

    async def _sendDocument(self, arguments: dict[str, Any]) -> Any:
        return self._file_message(arguments, "document")

    def _file_message(self, arguments: dict[str, Any], kind: str) -> Any:
        """A photo or document the bot sent (its bytes in ``sent_files``)."""
        upload = arguments.get(kind)
        if not isinstance(upload, dict) or "data" not in upload:
            raise _ApiError(400, f"Bad Request: there is no {kind} in the request")
        chat_id = int(arguments["chat_id"])
        message = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "chatgate"},
            "caption": arguments.get("caption") or "",
        }
        file_id = f"sent-{message['message_id']}"
        if kind == "photo":
            message["photo"] = [{"file_id": file_id, "file_unique_id": file_id, "width": 1,
                                 "height": 1, "file_size": len(upload["data"])}]  # fmt: skip
        else:
            message["document"] = {"file_id": file_id, "file_unique_id": file_id,
                                   "file_name": upload["filename"],
                                   "file_size": len(upload["data"])}  # fmt: skip
        with self._lock:
            self.sent_files.append({"kind": kind, "chat_id": chat_id, **upload,
                                    "caption": message["caption"]})  # fmt: skip
        return message

    async def _sendMessage(self, arguments: dict[str, Any]) -> Any:
        chat_id = int(arguments["chat_id"])
        limited = self.rate_limited.get(chat_id)
        if limited and limited[0] > 0:
            limited[0] -= 1
            raise _ApiError(
                429,
                f"Too Many Requests: retry after {limited[1]}",
                {"retry_after": limited[1]},
            )
        text = self._checked_text(arguments)
        message = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "supergroup"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "chatgate"},
            "text": text,
        }
        if arguments.get("message_thread_id"):
            message["message_thread_id"] = int(arguments["message_thread_id"])
            message["is_topic_message"] = True
        markup = arguments.get("reply_markup")
        if markup:
            message["reply_markup"] = markup
            self._check_markup(markup)
        with self._lock:
            self.messages[(chat_id, message["message_id"])] = {**message, "html": arguments["text"]}
            self.delivered.append({**message, "html": arguments["text"]})
        return message

    async def _editMessageText(self, arguments: dict[str, Any]) -> Any:
        key = (int(arguments["chat_id"]), int(arguments["message_id"]))
        text = self._checked_text(arguments)
        with self._lock:
            old = self.messages.get(key)
            if old is None:
                raise _ApiError(400, "Bad Request: message to edit not found")
            markup = arguments.get("reply_markup")
            if old["text"] == text and old.get("reply_markup") == markup:
                raise _ApiError(
                    400,
                    "Bad Request: message is not modified: specified new message content and "
                    "reply markup are exactly the same as a current content and reply markup "
                    "of the message",
                )
            old.update(text=text, html=arguments["text"], reply_markup=markup)
            return dict(old)

    async def _sendMessageDraft(self, arguments: dict[str, Any]) -> Any:
        """A preview in a private chat; like Telegram, only there, with a non-zero id."""
        if int(arguments["chat_id"]) <= 0:
            raise _ApiError(400, "Bad Request: draft can be sent only to private chats")
        if int(arguments.get("draft_id", 0)) == 0:
            raise _ApiError(400, "Bad Request: invalid draft identifier")
        self._checked_text(arguments)
        return True

    async def _setMyCommands(self, arguments: dict[str, Any]) -> Any:
        """Telegram's checks: 1-100 commands, names of 1-32 lowercase letters, digits and
        underscores, descriptions of 1-256 characters."""
        commands = arguments.get("commands")
        if isinstance(commands, str):
            commands = json.loads(commands)
        if not isinstance(commands, list) or len(commands) > 100:
            raise _ApiError(400, "Bad Request: commands must be a list of at most 100")
        for command in commands:
            if not re.fullmatch(r"[a-z0-9_]{1,32}", str(command.get("command", ""))):
                raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(str(command.get("description", ""))) <= 256:
                raise _ApiError(400, "Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        with self._lock:
            self.command_menus[_scope_key(arguments)] = [
                {"command": c["command"], "description": c["description"]} for c in commands
            ]
        return True

    async def _getMyCommands(self, arguments: dict[str, Any]) -> Any:
        with self._lock:
            return list(self.command_menus.get(_scope_key(arguments), []))

    async def _answerCallbackQuery(self, arguments: dict[str, Any]) -> Any:
        return True

    async def _sendChatAction(self, arguments: dict[str, Any]) -> Any:
        return True

    async def _setMessageReaction(self, arguments: dict[str, Any]) -> Any:
        """The bot's one reaction on a message (each call replaces it)."""
        key = (int(arguments["chat_id"]), int(arguments["message_id"]))
        reaction = arguments.get("reaction")
        if isinstance(reaction, str):
            reaction = json.loads(reaction)
        with self._lock:
            self.reactions[key] = [r["emoji"] for r in reaction or []]
        return True

    async def _setWebhook(self, arguments: dict[str, Any]) -> Any:
        self.webhook = {
            "url": arguments.get("url", ""),
            "has_custom_certificate": False,
            "pending_update_count": 0,
            "allowed_updates": arguments.get("allowed_updates") or [],
            "secret": arguments.get("secret_token"),
        }
        return True

    async def _deleteWebhook(self, arguments: dict[str, Any]) -> Any:
        self.webhook = {"url": "", "has_custom_certificate": False, "pending_update_count": 0}
        return True

    async def _getWebhookInfo(self, arguments: dict[str, Any]) -> Any:
        info = {k: v for k, v in self.webhook.items() if k != "secret"}
        info["pending_update_count"] = len(self._pending(0))
        return info

    async def _getUpdates(self, arguments: dict[str, Any]) -> Any:
        if self.webhook.get("url"):
            raise _ApiError(409, "Conflict: can't use getUpdates method while webhook is active")
        if self._polling:
            # Like Telegram: two pollers at once is a conflict (the newer one is refused here).
            self.conflicts += 1
            raise _ApiError(409, "Conflict: terminated by other getUpdates request")
        self._polling = True
        try:
            return await self._poll(arguments)
        finally:
            self._polling = False

    async def _poll(self, arguments: dict[str, Any]) -> Any:
        offset = int(arguments.get("offset") or 0)
        with self._lock:
            if offset:
                self._confirmed = max(self._confirmed, offset)
        deadline = time.monotonic() + float(arguments.get("timeout") or 0)
        assert self._arrived is not None
        wanted = set(arguments.get("allowed_updates") or ())
        while True:
            # Like Telegram: without allowed_updates, no reactions (nor member changes).
            found = [
                u
                for u in self._pending(self._confirmed)
                if (bool(wanted & u.keys()) if wanted else not _OPT_IN & u.keys())
            ]
            if found or self._closing or time.monotonic() >= deadline:
                return found[: int(arguments.get("limit") or 100)]
            self._arrived.clear()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._arrived.wait()
            except TimeoutError:
                pass

    def _pending(self, offset: int) -> list[dict[str, Any]]:
        with self._lock:
            return [u for u in self._updates if u["update_id"] >= offset]

    def _checked_text(self, arguments: dict[str, Any]) -> str:
        text = str(arguments.get("text", ""))
        if arguments.get("parse_mode") == "HTML":
            try:
                text = parse_html(text)
            except ValueError as exc:
                raise _ApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        if not text.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        if len(text) > 4096:
            raise _ApiError(400, "Bad Request: message is too long")
        return text

    def _check_markup(self, markup: Any) -> None:
        for row in markup.get("inline_keyboard", []):
            for button in row:
                data = button.get("callback_data")
                if data is not None and not 1 <= len(data.encode()) <= 64:
                    raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")


class _ApiError(Exception):
    def __init__(self, code: int, description: str, parameters: dict[str, Any] | None = None):
        super().__init__(description)
        self.code = code
        self.description = description
        self.parameters = parameters


def _scope_key(arguments: dict[str, Any]) -> str:
    """A ``setMyCommands``/``getMyCommands`` scope's type (chat scopes are not used)."""
    scope = arguments.get("scope")
    if isinstance(scope, str):
        scope = json.loads(scope)
    return str(scope.get("type")) if isinstance(scope, dict) else "default"


def _error(code: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=code)


async def _arguments(request: web.Request) -> dict[str, Any]:
    """PTB posts form fields (JSON-encoded when nested) or multipart; scripts post JSON."""
    if request.content_type == "application/json":
        body = await request.json()
        return dict(body) if isinstance(body, dict) else {}
    form = await request.post()
    arguments: dict[str, Any] = {}
    for key, value in form.items():
        if not isinstance(value, str):
            # An uploaded file: its name and bytes.
            arguments[key] = {"filename": value.filename, "data": value.file.read()}
            continue
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = value
        arguments[key] = decoded if isinstance(decoded, dict | list) else value
    return arguments
