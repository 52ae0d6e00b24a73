"""A fake Slack Web API on 127.0.0.1 (``SLACK_API_URL``), and Slack's request signing.

``/api/{method}`` answers what the real slack_sdk and slack-bolt call (``auth.test``,
``chat.postMessage``, ``chat.update``, ``chat.postEphemeral``, the chat streaming API
(``chat.startStream``, ``chat.appendStream``, ``chat.stopStream``), ``conversations.replies``,
``conversations.history``, ``views.publish``) and records every call. ``/respond/{name}`` is
a response_url (:meth:`FakeSlack.response_url`): what is posted to it is recorded as a
``response_url`` call. Posted messages are kept per channel
with their metadata, which the two reads return only with ``include_all_metadata``, as
Slack does. It can answer the next N ``chat.postMessage`` calls with 429 and
``Retry-After``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from tests.fakes.loopback import LoopbackServer

TEAM = "T0CHATGATE"
BOT_USER = "UBOTCG01"
BOT_ID = "BCG01"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-1-test-token"


def signed_headers(
    body: str, *, secret: str = SIGNING_SECRET, at: float | None = None
) -> dict[str, str]:
    """The headers Slack sends with ``body``: timestamp and v0 HMAC-SHA256 signature."""
    timestamp = str(int(at if at is not None else time.time()))
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
    }


def posted_ts(n: int) -> str:
    """The ts the fake gives the ``n``th message posted (from 1): later than any message
    the tests send in, as a real message posted in answer is."""
    return f"1800000000.{n:06d}"


class FakeSlack(LoopbackServer):
    """The server; use as a context manager. ``calls`` holds (method, arguments)."""

    def __init__(self) -> None:
        super().__init__()
        self.rate_limit_next = 0
        # The next this many auth.test calls fail (Slack having trouble).
        self.fail_auth_test = 0
        # What auth.test reports in X-OAuth-Scopes.
        self.scopes = (
            "app_mentions:read,chat:write,commands,im:history,channels:history,groups:history,"
            "files:read,files:write,reactions:write,reactions:read,assistant:write,im:write"
        )
        # Socket Mode: envelopes to push to the connected client, and its acks.
        self.acks: list[dict[str, Any]] = []
        self._outbox: asyncio.Queue[dict[str, Any]] | None = None
        self.connections = 0
        # While set, apps.connections.open fails (Slack having trouble).
        self.refuse_connections = False
        # Whether the chat streaming API answers (an app without it is refused).
        self.streaming = True
        # Whether the app is declared an agent (agents.sessions.* answer), and each agent
        # session's status and title, by (channel, thread_ts).
        self.agent = True
        self.sessions: dict[tuple[str, str], dict[str, str]] = {}
        # Files the bot shared (files_upload_v2), by file id: id, name, title, data.
        self.uploads: dict[str, dict[str, Any]] = {}
        # The bot's reactions, by (channel, message ts).
        self.reactions: dict[tuple[str, str], list[str]] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._ts = itertools.count(1)
        # The App Home view last published for each user id.
        self.homes: dict[str, dict[str, Any]] = {}
        # Every message posted, in order: {channel, ts, thread_ts, text, metadata}.
        self.messages: list[dict[str, Any]] = []
        # When each chat.postMessage arrived (time.monotonic()) and its text: what the
        # benchmarks time replies by.
        self.arrivals: list[tuple[float, str]] = []

    @property
    def api_url(self) -> str:
        """The Web API base for ``SLACK_API_URL``."""
        return f"http://127.0.0.1:{self.port}/api/"

    def settings(self) -> dict[str, str]:
        """The chatgate settings pointing Slack at this server."""
        return {
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.api_url,
        }

    def push(self, envelope: dict[str, Any]) -> None:
        """Send a Socket Mode envelope to the connected client."""
        outbox = self._outbox
        assert outbox is not None
        self._loop.call_soon_threadsafe(outbox.put_nowait, envelope)

    def drop(self) -> None:
        """Cut every Socket Mode connection without a close frame (the TCP connection is
        aborted, as a dead load balancer or a network partition would)."""

        def abort() -> None:
            for ws in self._sockets:
                transport = ws._req.transport if ws._req is not None else None
                if transport is not None:
                    transport.abort()

        self._loop.call_soon_threadsafe(abort)

    def wait_for_ack(self, envelope_id: str, *, timeout: float = 30) -> None:
        """Block until the client acknowledged this envelope."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(a.get("envelope_id") == envelope_id for a in list(self.acks)):
                return
            time.sleep(0.05)
        raise AssertionError(f"envelope {envelope_id} not acknowledged: {self.acks}")

    def posted(self, method: str = "chat.postMessage") -> list[dict[str, Any]]:
        """The arguments of every call of ``method``, in order."""
        return self.called(method)

    def routes(self, app: web.Application) -> None:
        """The Web API and the Socket Mode WebSocket."""
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        app.router.add_get("/link", self._socket)
        app.router.add_get("/files-pri/{path:.*}", self._hosted)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_post("/respond/{name}", self._respond)

    def response_url(self, name: str) -> str:
        """A response_url for a slash command or a press; posts to it are recorded as
        ``response_url`` calls (with ``name``)."""
        return f"http://127.0.0.1:{self.port}/respond/{name}"

    async def _respond(self, request: web.Request) -> web.Response:
        """A response_url: JSON with text, blocks, replace_original ..., answered ``ok``."""
        try:
            body = json.loads(await request.text())
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        self.record("response_url", {"name": request.match_info["name"], **body})
        return web.Response(text="ok")

    async def _upload(self, request: web.Request) -> web.Response:
        """Step two of ``files_upload_v2``: the bytes, to the URL step one handed out."""
        file_id = request.match_info["file_id"]
        if file_id not in self.uploads:
            return web.Response(status=404)
        if request.content_type == "multipart/form-data":
            form = await request.post()
            field = next(iter(form.values()))
            data = field.file.read() if hasattr(field, "file") else str(field).encode()
        else:
            data = await request.read()
        self.record("upload", {"file_id": file_id, "size": len(data)})
        self.uploads[file_id]["data"] = data
        return web.Response(text="OK - uploaded")

    def _files_api(self, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Steps one and three of ``files_upload_v2``, and ``files.info``: a file shared
        in a thread is a message of the bot's with the file on it."""
        if method == "files.getUploadURLExternal":
            file_id = f"F{len(self.uploads) + 900:08d}"
            self.uploads[file_id] = {"id": file_id, "name": arguments.get("filename"),
                                     "data": None}  # fmt: skip
            url = f"http://127.0.0.1:{self.port}/upload/{file_id}"
            return {"ok": True, "upload_url": url, "file_id": file_id}
        if method == "files.info":
            found = self.uploads.get(str(arguments.get("file")))
            if found is None:
                return {"ok": False, "error": "file_not_found"}
            return {"ok": True, "file": self._file(found)}
        files = arguments.get("files")
        files = json.loads(files) if isinstance(files, str) else files or []
        shared = []
        for item in files:
            found = self.uploads.get(str(item.get("id")))
            if found is None or found["data"] is None:
                return {"ok": False, "error": "file_upload_not_found"}
            found["title"] = item.get("title") or found["name"]
            shared.append(self._file(found))
        comment = arguments.get("initial_comment") or ""
        self.messages.append(
            {"channel": arguments.get("channel_id"), "ts": posted_ts(next(self._ts)),
             "thread_ts": arguments.get("thread_ts"), "text": comment, "metadata": None,
             "bot_id": BOT_ID, "user": BOT_USER, "files": shared}
        )  # fmt: skip
        return {"ok": True, "files": shared}

    @staticmethod
    def _file(found: dict[str, Any]) -> dict[str, Any]:
        return {"id": found["id"], "name": found["name"], "title": found.get("title"),
                "size": len(found["data"] or b"")}  # fmt: skip

    def add_file(self, name: str, data: bytes | int, *, mimetype: str) -> dict[str, Any]:
        """Hold a file someone shared (downloadable with the bot token); its ``files``
        entry as a message event carries it."""
        file_id = f"F{len(self.hosted) + 1:08d}"
        url = self.host_file(f"/files-pri/T0CHATGATE-{file_id}/{name}", data, token=TOKEN)
        size = data if isinstance(data, int) else len(data)
        return {"id": file_id, "name": name, "title": name, "mimetype": mimetype,
                "filetype": name.rsplit(".", 1)[-1], "size": size, "url_private": url,
                "url_private_download": url}  # fmt: skip

    async def started(self) -> None:
        """The Socket Mode outbox lives on the server's loop."""
        self._outbox = asyncio.Queue()

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        self._sockets.append(ws)
        await ws.send_json({"type": "hello", "num_connections": 1})
        outbox = self._outbox
        assert outbox is not None

        async def pump() -> None:
            while True:
                await ws.send_json(await outbox.get())

        pumping = asyncio.create_task(pump())
        try:
            async for message in ws:
                if message.type == web.WSMsgType.TEXT:
                    self.acks.append(json.loads(message.data))
        finally:
            pumping.cancel()
            self._sockets.remove(ws)
        return ws

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if method == "apps.connections.open":
            if request.headers.get("Authorization") != f"Bearer {APP_TOKEN}":
                return web.json_response({"ok": False, "error": "invalid_auth"})
            if self.refuse_connections:
                self.record("refused", {})
                return web.json_response({"ok": False, "error": "internal_error"})
            return web.json_response({"ok": True, "url": f"ws://127.0.0.1:{self.port}/link"})
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        raw = await request.text()
        if request.content_type == "application/json":
            arguments: dict[str, Any] = json.loads(raw or "{}")
        else:
            arguments = dict(parse_qsl(raw))
        arguments |= dict(request.query)
        if method == "chat.postMessage" and self.rate_limit_next > 0:
            self.rate_limit_next -= 1
            self.record("ratelimited", arguments)
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"}
            )
        self.record(method, arguments)
        if method == "auth.test" and self.fail_auth_test > 0:
            self.fail_auth_test -= 1
            return web.json_response({"ok": False, "error": "internal_error"})
        if method == "auth.test":
            return web.json_response(
                {"ok": True, "team_id": TEAM, "user_id": BOT_USER, "bot_id": BOT_ID, "team": "t"},
                headers={"X-OAuth-Scopes": self.scopes},
            )
        if method == "chat.update":
            found = self.message(str(arguments.get("ts")))
            if found is None:
                return web.json_response({"ok": False, "error": "message_not_found"})
            found["text"] = arguments.get("text")
            if arguments.get("metadata"):
                metadata = arguments["metadata"]
                found["metadata"] = json.loads(metadata) if isinstance(metadata, str) else metadata
        if method in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
            ts = arguments.get("ts") or posted_ts(next(self._ts))
            if method == "chat.postMessage":
                self.arrivals.append((time.monotonic(), str(arguments.get("text") or "")))
                metadata = arguments.get("metadata")
                self.messages.append(
                    {
                        "channel": arguments.get("channel"),
                        "ts": ts,
                        "thread_ts": arguments.get("thread_ts"),
                        "text": arguments.get("text"),
                        "metadata": json.loads(metadata) if isinstance(metadata, str) else metadata,
                        # Who posted it: the bot (the fake takes only the bot's token here).
                        "bot_id": arguments.get("as_bot_id", BOT_ID),
                    }
                )
            return web.json_response(
                {"ok": True, "channel": arguments.get("channel"), "ts": ts, "message_ts": ts}
            )
        if method == "views.publish":
            return web.json_response(self._publish(arguments))
        if method in ("reactions.add", "reactions.remove"):
            return web.json_response(self._react(method, arguments))
        if method in ("files.getUploadURLExternal", "files.completeUploadExternal", "files.info"):
            return web.json_response(self._files_api(method, arguments))
        if method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            return web.json_response(self._stream(method, arguments))
        if method == "agents.sessions.setStatus":
            return web.json_response(self._session(arguments))
        if method == "assistant.threads.setSuggestedPrompts":
            return web.json_response(self._suggest(arguments))
        if method == "conversations.open":
            if "im:write" not in self.scopes.split(","):
                return web.json_response(
                    {"ok": False, "error": "missing_scope", "needed": "im:write"}
                )
            users = str(arguments.get("users") or "")
            if not users or "," in users:
                return web.json_response({"ok": False, "error": "users_not_found"})
            return web.json_response({"ok": True, "channel": {"id": f"D{users}"}})
        if method in ("conversations.replies", "conversations.history"):
            if "channels:history" not in self.scopes.split(","):
                return web.json_response(
                    {"ok": False, "error": "missing_scope", "needed": "channels:history"}
                )
            return web.json_response(self._read(method, arguments))
        return web.json_response({"ok": False, "error": "unknown_method"})

    def _publish(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """An App Home view, checked as Slack checks it (a home view of at most 100 blocks,
        block ids unique and at most 255 characters)."""
        view = arguments.get("view")
        view = json.loads(view) if isinstance(view, str) else view
        if not isinstance(view, dict) or view.get("type") != "home":
            return {"ok": False, "error": "invalid_arguments"}
        blocks = view.get("blocks") or []
        ids = [b["block_id"] for b in blocks if "block_id" in b]
        if len(blocks) > 100 or len(set(ids)) != len(ids) or any(len(i) > 255 for i in ids):
            return {"ok": False, "error": "invalid_blocks"}
        if not str(arguments.get("user_id") or "").startswith(("U", "W")):
            return {"ok": False, "error": "user_not_found"}
        self.homes[str(arguments["user_id"])] = view
        return {"ok": True, "view": {"id": "V0HOME", **view}}

    def _suggest(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """assistant.threads.setSuggestedPrompts, checked as Slack documents it: a channel,
        one to four prompts each with a title and a message (an agent app's call with a
        thread_ts does nothing, which the tests see in the recorded call)."""
        prompts = arguments.get("prompts")
        prompts = json.loads(prompts) if isinstance(prompts, str) else prompts
        if not str(arguments.get("channel_id") or "").startswith(("C", "D", "G")):
            return {"ok": False, "error": "channel_not_found"}
        if (
            not isinstance(prompts, list)
            or not 1 <= len(prompts) <= 4
            or not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts)
        ):
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True}

    def _react(self, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The bot's reactions per message, as Slack keeps them."""
        key = (str(arguments.get("channel")), str(arguments.get("timestamp")))
        names = self.reactions.setdefault(key, [])
        name = str(arguments.get("name"))
        if method == "reactions.add":
            if name in names:
                return {"ok": False, "error": "already_reacted"}
            names.append(name)
        else:
            if name not in names:
                return {"ok": False, "error": "no_reaction"}
            names.remove(name)
        return {"ok": True}

    def message(self, ts: str) -> dict[str, Any] | None:
        """The message posted (or streamed) with this ts."""
        return next((m for m in self.messages if m["ts"] == ts), None)

    def _stream(self, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The chat streaming API, as Slack answers it: a stream is a message in a thread,
        for a recipient when in a channel; text is only ever appended, and nothing after
        the stop."""
        if not self.streaming:
            return {"ok": False, "error": "not_allowed"}
        channel = str(arguments.get("channel"))
        if method == "chat.startStream":
            if not arguments.get("thread_ts"):
                return {"ok": False, "error": "invalid_arguments"}
            if channel.startswith("C") and not (
                arguments.get("recipient_team_id") and arguments.get("recipient_user_id")
            ):
                return {"ok": False, "error": "missing_recipient_team_id"}
            ts = posted_ts(next(self._ts))
            self.messages.append(
                {
                    "channel": channel,
                    "ts": ts,
                    "thread_ts": arguments["thread_ts"],
                    "text": str(arguments.get("markdown_text") or ""),
                    "metadata": None,
                    "bot_id": BOT_ID,
                    "streaming": True,
                }
            )
            return {"ok": True, "channel": channel, "ts": ts}
        found = self.message(str(arguments.get("ts")))
        if found is None:
            return {"ok": False, "error": "message_not_found"}
        if not found.get("streaming"):
            return {"ok": False, "error": "message_not_in_streaming_state"}
        found["text"] += str(arguments.get("markdown_text") or "")
        if method == "chat.stopStream":
            found["streaming"] = False
            metadata = arguments.get("metadata")
            if metadata:
                found["metadata"] = json.loads(metadata) if isinstance(metadata, str) else metadata
        return {"ok": True, "channel": channel, "ts": found["ts"]}

    def _session(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """agents.sessions.setStatus: made on the first call (with its title), updated
        after; thread-based, so a thread is needed."""
        if not self.agent:
            return {"ok": False, "error": "not_allowed_token_type"}
        status, thread = arguments.get("status"), arguments.get("thread_ts")
        if status not in ("active", "processing", "suspended", "closed") or not thread:
            return {"ok": False, "error": "invalid_arguments"}
        key = (str(arguments.get("channel_id")), str(thread))
        session = self.sessions.setdefault(key, {"title": str(arguments.get("title") or "")})
        session["status"] = str(status)
        return {"ok": True, "status": status, "title": session["title"]}

    def stop_session(self, channel: str, thread_ts: str) -> list[str]:
        """What Slack does when someone presses the session's Stop button: it stops the
        app's streams in the thread (and says which in the event it sends)."""
        stopped = []
        for found in self.messages:
            here = found["channel"] == channel and found.get("thread_ts") == thread_ts
            if here and found.get("streaming"):
                found["streaming"] = False
                stopped.append(str(found["ts"]))
        return stopped

    def inject(self, channel: str, thread_ts: str | None, text: str, metadata: Any) -> None:
        """A message someone else (another app) posted, with whatever metadata it chose."""
        ts = posted_ts(next(self._ts))
        self.messages.append(
            {
                "channel": channel,
                "ts": ts,
                "thread_ts": thread_ts,
                "text": text,
                "metadata": metadata,
                "bot_id": "BOTHERAPP",
            }
        )

    def thread(self, channel: str, thread_ts: str | None) -> list[dict[str, Any]]:
        """The messages posted in a thread (or, for None, at the channel's top level)."""
        return [m for m in self.messages if m["channel"] == channel and m["thread_ts"] == thread_ts]

    def _read(self, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``conversations.replies`` (oldest first) or ``.history`` (newest first), one page
        of ``limit`` after ``oldest``, metadata only when asked for."""
        thread = arguments.get("ts") if method == "conversations.replies" else None
        found = [
            m
            for m in self.thread(str(arguments.get("channel")), thread)
            if float(m["ts"]) > float(arguments.get("oldest") or 0)
        ]
        if method == "conversations.history":
            found.reverse()
        start = int(arguments.get("cursor") or 0)
        limit = int(arguments.get("limit") or 100)
        page = found[start : start + limit]
        metadata = str(arguments.get("include_all_metadata")).lower() in ("true", "1")
        messages = [
            {
                "type": "message",
                "ts": m["ts"],
                "thread_ts": m["thread_ts"],
                "text": m["text"],
                "bot_id": m["bot_id"],
                **({"metadata": m["metadata"]} if metadata and m["metadata"] else {}),
                **({"files": m["files"], "user": m["user"]} if m.get("files") else {}),
            }
            for m in page
        ]
        more = start + limit < len(found)
        return {
            "ok": True,
            "messages": messages,
            "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""},
        }
