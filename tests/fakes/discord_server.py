"""A fake Discord REST API and gateway on 127.0.0.1 (``DISCORD_API_URL``,
``DISCORD_GATEWAY_URL``) for the real discord.py.

REST answers what chatgate calls (login, messages, edits, typing, interaction callbacks and
followups) with ``Content-Type: application/json`` exactly, as discord.py requires, and
honours ``nonce`` + ``enforce_nonce`` like Discord (the same nonce returns the message
already created). It can answer a channel's next message with a 429 carrying the ``Via``
header (a real rate limit, which discord.py retries; without ``Via`` it is a Cloudflare
ban). The gateway says HELLO, answers IDENTIFY with READY and a GUILD_CREATE (each channel
with its ``last_message_id``), RESUME with RESUMED and the dispatches the session missed,
heartbeats with ACKs, and pushes the dispatches a test gives it (messages, button presses,
reactions, application commands and autocomplete). Application commands registered with
``PUT applications/{id}/commands`` (or a guild's) are kept and answered by the ``GET``;
interaction followups land in the interaction's channel, and ``@original`` of a press's
token edits the message pressed (an ephemeral one too). Like Discord, what is sent
while no session is connected reaches only a RESUME of the same session; a new session
(IDENTIFY) starts from now. Every message is kept per channel, and
``GET channels/{id}/messages`` pages through them (``after``, ``before``, ``limit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from typing import Any

from aiohttp import web

from tests.fakes.loopback import LoopbackServer

TOKEN = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.fake.chatgate-test-token"
BOT_ID = "1100000000000000001"
APP_ID = BOT_ID
GUILD = "1000000000000000100"
CHANNEL = "1200000000000000010"
THREAD = "1300000000000000020"
BOT_USER = {"id": BOT_ID, "username": "chatgate", "discriminator": "4242", "avatar": None,
            "bot": True, "global_name": None}  # fmt: skip
# GATEWAY_MESSAGE_CONTENT: the privileged intent switched on in the developer portal.
MESSAGE_CONTENT_FLAG = 1 << 18
EPHEMERAL = 1 << 6
DISCORD_EPOCH_MS = 1_420_070_400_000
# What @everyone may do in the test guild: view channels, send, read history.
EVERYONE_PERMISSIONS = str((1 << 10) | (1 << 11) | (1 << 16))


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def user(user_id: str, name: str = "someone") -> dict[str, Any]:
    """A user object."""
    return {"id": user_id, "username": name, "discriminator": "0", "avatar": None,
            "global_name": name.title()}  # fmt: skip


class FakeDiscord(LoopbackServer):
    """The server; use as a context manager. ``calls`` holds (route, JSON body)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: dict[str, dict[str, Any]] = {}
        # The bot's reactions, by message id (emoji as the path carried them, decoded).
        self.reactions: dict[str, list[str]] = {}
        # Every message (people's and the bot's) by channel, oldest first.
        self.history: dict[str, list[dict[str, Any]]] = {}
        # The current session's dispatches (a RESUME replays those after its seq).
        self._session_id: str | None = None
        self._backlog: list[dict[str, Any]] = []
        # Messages created, in order (a nonce-deduplicated resend is not a new one).
        self.created: list[dict[str, Any]] = []
        # Files the bot sent as attachments: channel_id, message_id, filename, data.
        self.sent_files: list[dict[str, Any]] = []
        self.rate_limited: dict[str, int] = {}
        self.application_flags = MESSAGE_CONTENT_FLAG
        self.identified: list[dict[str, Any]] = []
        self.resumed = 0
        self.connections = 0
        self._last_id = 0
        self._nonces: dict[tuple[str, str], dict[str, Any]] = {}
        self._socket: web.WebSocketResponse | None = None
        self._seq = itertools.count(2)
        self.last_press: dict[str, Any] | None = None
        # The DM channel with each person the bot opened one with (POST users/@me/channels).
        self.dm_channels: dict[str, str] = {}
        # While set, the gateway endpoint answers 503 (Discord having trouble).
        self.refuse_gateway = False
        # Messages sent while no client was connected (a lower bound of those no session
        # heard: a send into a connection dying unnoticed counts as heard).
        self.unheard = 0
        # Seconds each history read takes (a slow catch-up).
        self.history_delay = 0.0
        # Application commands as registered: by guild id, None for the global ones.
        self.app_commands: dict[str | None, list[dict[str, Any]]] = {}
        # Per interaction token: its channel, and the message a press was on.
        self._tokens: dict[str, dict[str, Any]] = {}

    @property
    def api_url(self) -> str:
        """The REST base for ``DISCORD_API_URL``."""
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        """The gateway for ``DISCORD_GATEWAY_URL``."""
        return f"ws://127.0.0.1:{self.port}/gateway"

    def settings(self) -> dict[str, str]:
        """The chatgate settings pointing Discord at this server."""
        return {
            "DISCORD_BOT_TOKEN": TOKEN,
            "DISCORD_API_URL": self.api_url,
            "DISCORD_GATEWAY_URL": self.gateway_url,
        }

    def routes(self, app: web.Application) -> None:
        """REST under /api/v10 and the gateway WebSocket."""
        app.router.add_get("/gateway", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._rest)
        app.router.add_get("/attachments/{path:.*}", self._hosted)

    def attachment(self, name: str, data: bytes | int, *, content_type: str) -> dict[str, Any]:
        """A file on the CDN (here), as a message's ``attachments`` entry carries it."""
        attachment_id = self.next_id()
        url = self.host_file(f"/attachments/{CHANNEL}/{attachment_id}/{name}", data)
        size = data if isinstance(data, int) else len(data)
        return {"id": attachment_id, "filename": name, "size": size, "url": url,
                "proxy_url": url, "content_type": content_type}  # fmt: skip

    def next_id(self) -> str:
        """A fresh snowflake: like Discord's, the time it was made (milliseconds since
        2015) above 22 bits of sequence, so ids grow with time."""
        with self._lock:
            stamp = (int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22
            self._last_id = max(stamp, self._last_id + 1)
            return str(self._last_id)

    def limit_channel(self, channel_id: str, times: int = 1) -> None:
        """Answer the next ``times`` messages to ``channel_id`` with a 429 (with ``Via``)."""
        self.rate_limited[channel_id] = times

    @property
    def connected(self) -> bool:
        """Whether a client holds a gateway connection now."""
        return self._socket is not None

    def wait_connected(self, count: int = 1, timeout: float = 30) -> None:
        """Block until ``count`` gateway sessions identified (or resumed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.identified) + self.resumed >= count and self._socket is not None:
                return
            time.sleep(0.05)
        raise AssertionError(f"no gateway session after {timeout}s")

    def dispatch(self, event: str, data: dict[str, Any], *, connected: bool = True) -> bool:
        """Push a dispatch to the connected client (``connected``: one must be); False
        when none is, or the send failed: only a RESUME of this session gets it then."""
        socket = self._socket
        assert socket is not None or not connected, "no client connected"
        frame = {"op": 0, "t": event, "s": next(self._seq), "d": data}
        self._backlog.append(frame)
        if socket is None:
            return False
        try:
            asyncio.run_coroutine_threadsafe(socket.send_json(frame), self._loop).result(10)
        except (ConnectionError, RuntimeError, TimeoutError):
            return False
        return True

    def drop(self) -> None:
        """Cut the gateway connection without a close frame (the TCP connection aborts)."""

        def abort() -> None:
            socket = self._socket
            if socket is not None and socket._req is not None:
                transport = socket._req.transport
                if transport is not None:
                    transport.abort()

        self._loop.call_soon_threadsafe(abort)

    def invalidate(self) -> None:
        """End the session as Discord does (op 9, not resumable): the client must
        IDENTIFY a new one, and what is sent until then reaches no session."""
        socket = self._socket
        self._session_id = None
        self._backlog = []
        if socket is not None:
            with contextlib.suppress(ConnectionError, RuntimeError, TimeoutError):
                asyncio.run_coroutine_threadsafe(
                    socket.send_json({"op": 9, "d": False}), self._loop
                ).result(10)

    def reconnect(self) -> None:
        """Ask the client to reconnect and RESUME (op 7)."""
        socket = self._socket
        assert socket is not None
        asyncio.run_coroutine_threadsafe(socket.send_json({"op": 7, "d": None}), self._loop).result(
            10
        )

    def message_create(
        self,
        text: str,
        *,
        author: str = "301234567890123456",
        channel: str = CHANNEL,
        guild: str | None = GUILD,
        mention: bool = False,
        connected: bool = True,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A person writes: keep the message and push its MESSAGE_CREATE (``connected``:
        a client must be connected; otherwise, when none is, it is only kept); return
        its data."""
        data: dict[str, Any] = {
            "id": self.next_id(),
            "type": 0,
            "channel_id": channel,
            "author": user(author),
            "content": f"<@{BOT_ID}> {text}" if mention else text,
            "mentions": [BOT_USER] if mention else [],
            "mention_roles": [],
            "mention_everyone": False,
            "attachments": attachments or [],
            "embeds": [],
            "timestamp": "2026-11-30T08:00:00.000000+00:00",
            "edited_timestamp": None,
            "tts": False,
            "pinned": False,
            "flags": 0,
            "components": [],
        }
        if guild is not None:
            data["guild_id"] = guild
            data["member"] = {"roles": [], "joined_at": "2026-01-01T00:00:00+00:00",
                              "deaf": False, "mute": False, "flags": 0}  # fmt: skip
        self.history.setdefault(channel, []).append(data)
        if not self.dispatch("MESSAGE_CREATE", data, connected=connected):
            self.unheard += 1
        return data

    def react(
        self, message: dict[str, Any], emoji: str, *, reactor: str, added: bool = True
    ) -> None:
        """Push a MESSAGE_REACTION_ADD (or ``_REMOVE``) of a unicode emoji on ``message``
        by ``reactor``, shaped as Discord sends them (the author on adds only)."""
        data: dict[str, Any] = {
            "user_id": reactor,
            "channel_id": message["channel_id"],
            "message_id": message["id"],
            "emoji": {"id": None, "name": emoji},
            "burst": False,
            "type": 0,
        }
        if message.get("guild_id") or message["channel_id"] in (CHANNEL, THREAD):
            data["guild_id"] = GUILD
        if added:
            data["message_author_id"] = message["author"]["id"]
            if "guild_id" in data:
                data["member"] = {"user": user(reactor), "roles": [],
                                  "joined_at": "2026-01-01T00:00:00+00:00", "deaf": False,
                                  "mute": False, "flags": 0}  # fmt: skip
        self.dispatch("MESSAGE_REACTION_ADD" if added else "MESSAGE_REACTION_REMOVE", data)

    def press(self, message: dict[str, Any], custom_id: str, *, presser: str) -> str:
        """Push an INTERACTION_CREATE for a button on ``message`` (in a DM when it was
        posted in one of ``dm_channels``); return its id."""
        interaction_id = self.next_id()
        channel = message["channel_id"]
        if channel in self.dm_channels.values():
            return self._press_in_dm(message, custom_id, presser, interaction_id)
        data: dict[str, Any] = {
            "id": interaction_id,
            "application_id": APP_ID,
            "type": 3,
            "token": f"itok-{interaction_id}",
            "version": 1,
            "channel_id": channel,
            "channel": {"id": channel, "type": 11 if channel == THREAD else 0,
                        "parent_id": CHANNEL if channel == THREAD else None, "guild_id": GUILD},
            "guild_id": GUILD,
            "member": {"user": user(presser), "roles": [], "permissions": "0",
                       "joined_at": "2026-01-01T00:00:00+00:00", "deaf": False, "mute": False,
                       "flags": 0},
            "message": message,
            "data": {"custom_id": custom_id, "component_type": 2},
            "app_permissions": "0",
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": GUILD},
            "context": 0,
            "attachment_size_limit": 10485760,
        }  # fmt: skip
        self._tokens[data["token"]] = {"channel": channel, "message": message["id"], "type": 3}
        self.dispatch("INTERACTION_CREATE", data)
        self.last_press = data
        return interaction_id

    def _press_in_dm(
        self, message: dict[str, Any], custom_id: str, presser: str, interaction_id: str
    ) -> str:
        channel = message["channel_id"]
        data: dict[str, Any] = {
            "id": interaction_id, "application_id": APP_ID, "type": 3,
            "token": f"itok-{interaction_id}", "version": 1, "channel_id": channel,
            "channel": {"id": channel, "type": 1, "recipients": [user(presser)]},
            "user": user(presser), "message": message,
            "data": {"custom_id": custom_id, "component_type": 2},
            "app_permissions": "0", "locale": "en-US", "entitlements": [],
            "authorizing_integration_owners": {"0": GUILD}, "context": 1,
            "attachment_size_limit": 10485760,
        }  # fmt: skip
        self._tokens[data["token"]] = {"channel": channel, "message": message["id"], "type": 3}
        self.dispatch("INTERACTION_CREATE", data)
        self.last_press = data
        return interaction_id

    def command(
        self,
        name: str,
        options: dict[str, str] | None = None,
        *,
        user_id: str,
        channel: str = CHANNEL,
        guild: str | None = GUILD,
        focused: str | None = None,
    ) -> str:
        """Push an INTERACTION_CREATE for the application command ``name`` with string
        ``options``, as Discord sends it when someone runs it (``focused``: an
        autocomplete while they type into that option instead); return its id."""
        interaction_id = self.next_id()
        registered = {c["name"]: c for c in self.app_commands.get(guild, [])} or {
            c["name"]: c for c in self.app_commands.get(None, [])
        }
        sent_options = [
            {
                "name": key,
                "type": 3,
                "value": value,
                **({"focused": True} if key == focused else {}),
            }
            for key, value in (options or {}).items()
        ]
        kind = 1 if guild is None else (11 if channel == THREAD else 0)
        data: dict[str, Any] = {
            "id": interaction_id,
            "application_id": APP_ID,
            "type": 4 if focused else 2,
            "token": f"itok-{interaction_id}",
            "version": 1,
            "channel_id": channel,
            "channel": {"id": channel, "type": kind,
                        "parent_id": CHANNEL if channel == THREAD else None},
            "data": {"id": registered.get(name, {}).get("id", "1"), "name": name, "type": 1,
                     "options": sent_options},
            "app_permissions": "0",
            "locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": guild or "0"},
            "context": 0 if guild else 1,
            "attachment_size_limit": 10485760,
        }  # fmt: skip
        if guild is not None:
            data["guild_id"] = guild
            data["guild_locale"] = "en-US"
            data["channel"]["guild_id"] = guild
            data["member"] = {"user": user(user_id), "roles": [], "permissions": "0",
                              "joined_at": "2026-01-01T00:00:00+00:00", "deaf": False,
                              "mute": False, "flags": 0}  # fmt: skip
        else:
            data["user"] = user(user_id)
        self._tokens[data["token"]] = {"channel": channel, "message": None, "type": data["type"]}
        self.dispatch("INTERACTION_CREATE", data)
        return interaction_id

    def callbacks(self, interaction_id: str) -> list[dict[str, Any]]:
        """The bodies of the responses to one interaction (defer, autocomplete ...)."""
        return [
            body
            for route, body in list(self.calls)
            if route.startswith(f"POST interactions/{interaction_id}/")
        ]

    def followups(self, interaction_id: str) -> list[dict[str, Any]]:
        """The followup messages sent through one interaction's token."""
        return [
            body
            for route, body in list(self.calls)
            if route.startswith(f"POST webhooks/{APP_ID}/itok-{interaction_id}")
        ]

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_gateway:
            return web.Response(status=503, text="upstream trouble")
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self.connections += 1
        await socket.send_json({"op": 10, "d": {"heartbeat_interval": 41250}})
        async for frame in socket:
            if frame.type != web.WSMsgType.TEXT:
                continue
            payload = json.loads(frame.data)
            op = payload.get("op")
            if op == 1:
                await socket.send_json({"op": 11})
            elif op == 2:
                self.identified.append(payload["d"])
                self._socket = socket
                self._session_id = f"session-{self.connections}"
                self._backlog = []
                await socket.send_json(self._ready())
                await socket.send_json(
                    {"op": 0, "t": "GUILD_CREATE", "s": next(self._seq), "d": self._guild()}
                )
            elif op == 6:
                resume = payload["d"]
                if resume.get("session_id") != self._session_id:
                    await socket.send_json({"op": 9, "d": False})  # invalid session
                    continue
                self.resumed += 1
                self._socket = socket
                seq = int(resume.get("seq") or 0)
                for frame in [f for f in self._backlog if f["s"] > seq]:
                    await socket.send_json(frame)
                await socket.send_json({"op": 0, "t": "RESUMED", "s": next(self._seq), "d": {}})
        if self._socket is socket:
            self._socket = None
        return socket

    def _ready(self) -> dict[str, Any]:
        return {
            "op": 0,
            "t": "READY",
            "s": 1,
            "d": {
                "v": 10,
                "user": BOT_USER,
                "guilds": [{"id": GUILD, "unavailable": True}],
                "session_id": self._session_id,
                "resume_gateway_url": self.gateway_url,
                "application": {"id": APP_ID, "flags": self.application_flags},
                "private_channels": [],
            },
        }

    def _guild(self) -> dict[str, Any]:
        channel = {
            "id": CHANNEL,
            "type": 0,
            "name": "ops",
            "position": 0,
            "guild_id": GUILD,
            "permission_overwrites": [],
            "nsfw": False,
            "parent_id": None,
            "last_message_id": self.last_message_id(CHANNEL),
        }
        thread = {
            "id": THREAD,
            "type": 11,
            "name": "incident",
            "guild_id": GUILD,
            "parent_id": CHANNEL,
            "owner_id": "301234567890123456",
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": "2026-11-30T08:00:00+00:00",
                "locked": False,
            },
            "member": {
                "id": THREAD,
                "user_id": BOT_ID,
                "join_timestamp": "2026-11-30T08:00:00+00:00",
                "flags": 0,
            },
            "message_count": 1,
            "member_count": 2,
            "last_message_id": self.last_message_id(THREAD),
        }
        return {
            "id": GUILD, "name": "Test guild", "icon": None, "owner_id": "301234567890123456",
            "roles": [{"id": GUILD, "name": "@everyone", "permissions": EVERYONE_PERMISSIONS,
                       "position": 0,
                       "color": 0, "hoist": False, "managed": False, "mentionable": False,
                       "flags": 0}],
            "channels": [channel], "threads": [thread], "emojis": [],
            "members": [{"user": BOT_USER, "roles": [], "joined_at": "2026-01-01T00:00:00+00:00",
                         "deaf": False, "mute": False, "flags": 0}],
            "stickers": [], "features": [], "member_count": 2, "large": False,
            "unavailable": False, "joined_at": "2026-01-01T00:00:00+00:00", "voice_states": [],
            "presences": [], "stage_instances": [], "guild_scheduled_events": [],
            "verification_level": 0, "default_message_notifications": 0,
            "explicit_content_filter": 0, "mfa_level": 0, "premium_tier": 0,
            "system_channel_flags": 0, "preferred_locale": "en-US", "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
        }  # fmt: skip

    async def _rest(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        body: Any = None
        uploads: list[dict[str, Any]] = []
        if request.can_read_body:
            if request.content_type == "multipart/form-data":
                form = await request.post()
                payload = form.get("payload_json")
                body = json.loads(payload) if isinstance(payload, str) else {}
                for key, value in form.items():
                    if key.startswith("files[") and not isinstance(value, str):
                        uploads.append({"filename": value.filename, "data": value.file.read()})
                body["multipart"] = True
            else:
                raw = await request.read()
                body = json.loads(raw) if raw else None
        route = f"{request.method} {path}"
        authorised = request.headers.get("Authorization") == f"Bot {TOKEN}"
        if not authorised and not path.startswith(("interactions/", "webhooks/")):
            return _json({"message": "401: Unauthorized", "code": 0}, 401)
        if request.method == "GET":
            self.record(route, dict(request.query))
        else:
            self.record(route, body if isinstance(body, dict) else {"body": body})
        parts = path.split("/")
        if route == "GET users/@me":
            return _json(BOT_USER)
        if route == "GET oauth2/applications/@me":
            return _json(self._application())
        if route == "POST users/@me/channels":
            recipient = str((body or {}).get("recipient_id") or "")
            if not recipient.isdigit():
                return _json({"message": "Invalid Form Body", "code": 50035}, 400)
            channel = self.dm_channels.setdefault(recipient, self.next_id())
            return _json({"id": channel, "type": 1, "last_message_id": None, "flags": 0,
                          "recipients": [user(recipient)]})  # fmt: skip
        if request.method == "POST" and len(parts) == 3 and parts[0] == "channels":
            if parts[2] == "typing":
                return web.Response(status=204)
            if parts[2] == "messages":
                return self._create(parts[1], body or {}, uploads)
        if route.startswith("GET channels/") and len(parts) == 3 and parts[2] == "messages":
            await asyncio.sleep(self.history_delay)
            return self._history(parts[1], request.query)
        if len(parts) == 7 and parts[4] == "reactions" and parts[6] == "@me":
            mine = self.reactions.setdefault(parts[3], [])
            if request.method == "PUT" and parts[5] not in mine:
                mine.append(parts[5])
            elif request.method == "DELETE" and parts[5] in mine:
                mine.remove(parts[5])
            return web.Response(status=204)
        if request.method == "PATCH" and len(parts) == 4 and parts[2] == "messages":
            return self._edit(parts[3], body or {})
        if parts[0] == "interactions" and parts[-1] == "callback":
            return self._callback(parts[1], body or {})
        if parts[0] == "webhooks" and len(parts) >= 3:
            return self._webhook(request.method, parts, body or {})
        if parts[0] == "applications" and parts[-1] == "commands":
            guild = parts[3] if len(parts) == 5 and parts[2] == "guilds" else None
            if request.method == "PUT":
                return _json(self._register(guild, body))
            if request.method == "GET":
                return _json(self.app_commands.get(guild, []))
        return _json({"message": "404: Not Found", "code": 0}, 404)

    def _register(self, guild: str | None, commands: Any) -> list[dict[str, Any]]:
        """A bulk overwrite: the commands as Discord keeps them (ids, defaults filled)."""
        kept = []
        for command in json.loads(json.dumps(commands or [])):  # the recorded body stays
            stored = {"id": self.next_id(), "application_id": APP_ID, "version": self.next_id(),
                      "default_member_permissions": None, "nsfw": False,
                      "integration_types": [0], "contexts": None, **command}  # fmt: skip
            if guild is not None:
                stored["guild_id"] = guild
            for option in stored.get("options") or []:
                if not option.get("required"):
                    option.pop("required", None)  # Discord leaves defaults out
            kept.append(stored)
        self.app_commands[guild] = kept
        return kept

    def _webhook(self, method: str, parts: list[str], body: dict[str, Any]) -> web.Response:
        """Followups through an interaction's token, and edits of its messages."""
        token = self._tokens.get(parts[2], {})
        if method == "POST" and len(parts) == 3:
            return _json(self._message(token.get("channel", CHANNEL), body))
        if method == "PATCH" and len(parts) == 5 and parts[3] == "messages":
            target = token.get("message") if parts[4] == "@original" else parts[4]
            if target is None:
                return _json({"message": "Unknown Message", "code": 10008}, 404)
            return self._edit(str(target), body)
        return _json({"message": "404: Not Found", "code": 0}, 404)

    def _application(self) -> dict[str, Any]:
        return {
            "id": APP_ID, "name": "chatgate", "icon": None, "description": "",
            "bot_public": True, "bot_require_code_grant": False, "owner": user("1"),
            "verify_key": "00" * 32, "flags": self.application_flags, "team": None,
            "summary": "", "rpc_origins": [], "interactions_endpoint_url": None,
        }  # fmt: skip

    def _create(
        self, channel_id: str, body: dict[str, Any], uploads: list[dict[str, Any]] | None = None
    ) -> web.Response:
        left = self.rate_limited.get(channel_id, 0)
        if left > 0:
            self.rate_limited[channel_id] = left - 1
            self.record("ratelimited", {"channel_id": channel_id})
            return _json(
                {"message": "You are being rate limited.", "retry_after": 0.5, "global": False},
                429,
                {"Via": "1.1 google", "X-RateLimit-Scope": "user", "Retry-After": "1"},
            )
        content = str(body.get("content") or "")
        if len(content) > 2000:
            return _json({"message": "Invalid Form Body", "code": 50035}, 400)
        nonce = body.get("nonce")
        if body.get("enforce_nonce") and nonce is not None:
            known = self._nonces.get((channel_id, str(nonce)))
            if known is not None:
                return _json(known)
        message = self._message(channel_id, body)
        for upload in uploads or ():
            attachment_id = self.next_id()
            message["attachments"].append(
                {"id": attachment_id, "filename": upload["filename"], "size": len(upload["data"]),
                 "url": f"http://127.0.0.1:{self.port}/attachments/{channel_id}/{attachment_id}"}
            )  # fmt: skip
            self.sent_files.append(
                {"channel_id": channel_id, "message_id": message["id"], **upload}
            )
        if body.get("enforce_nonce") and nonce is not None:
            self._nonces[(channel_id, str(nonce))] = message
        self.created.append(message)
        return _json(message)

    def _message(self, channel_id: str, body: dict[str, Any]) -> dict[str, Any]:
        message = {
            "id": self.next_id(),
            "type": 19 if body.get("message_reference") else 0,
            "channel_id": channel_id,
            "author": BOT_USER,
            "content": str(body.get("content") or ""),
            "components": body.get("components") or [],
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "attachments": [],
            "embeds": [],
            "timestamp": "2026-11-30T08:00:00.000000+00:00",
            "edited_timestamp": None,
            "tts": False,
            "pinned": False,
            "flags": int(body.get("flags") or 0),
            "allowed_mentions": body.get("allowed_mentions"),
        }
        if body.get("message_reference"):
            message["message_reference"] = body["message_reference"]
        self.messages[message["id"]] = message
        if not message["flags"] & EPHEMERAL:
            self.history.setdefault(channel_id, []).append(message)
        return message

    def _history(self, channel_id: str, query: Any) -> web.Response:
        """Like Discord: the ``limit`` messages nearest ``after`` (or before ``before``,
        or the newest), newest first."""
        limit = max(1, min(100, int(query.get("limit", 50))))
        kept = self.history.get(channel_id, [])
        if "after" in query:
            after = int(query["after"])
            found = [m for m in kept if int(m["id"]) > after][:limit]
        else:
            before = int(query["before"]) if "before" in query else None
            found = [m for m in kept if before is None or int(m["id"]) < before][-limit:]
        return _json(list(reversed(found)))

    def last_message_id(self, channel_id: str) -> str | None:
        """The newest message in a channel (what GUILD_CREATE says of it)."""
        kept = self.history.get(channel_id)
        return kept[-1]["id"] if kept else None

    def _edit(self, message_id: str, body: dict[str, Any]) -> web.Response:
        message = self.messages.get(message_id)
        if message is None:
            return _json({"message": "Unknown Message", "code": 10008}, 404)
        if "content" in body:
            message["content"] = body["content"]
        if "components" in body:
            message["components"] = body["components"]
        message["edited_timestamp"] = "2026-11-30T08:00:01.000000+00:00"
        return _json(message)

    def _callback(self, interaction_id: str, body: dict[str, Any]) -> web.Response:
        token = self._tokens.get(f"itok-{interaction_id}", {})
        return _json(
            {
                "interaction": {
                    "id": interaction_id,
                    "type": token.get("type", 3),
                    "activity_instance_id": None,
                    "response_message_id": None,
                    "response_message_loading": False,
                    "response_message_ephemeral": False,
                },
                "resource": {"type": int(body.get("type", 6))},
            }
        )
