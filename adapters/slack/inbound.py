"""Slack's inbound side: ``POST /slack/events`` (the Events API, interactivity and the
slash command on one Request URL) and Socket Mode.

Our own check of the signature comes first, over the raw bytes (bolt parses the body
before it verifies, and a malformed timestamp makes its verifier raise). A message event,
nearly all of the traffic, is then parsed once and stored directly, and so is a reaction
(a rating of a reply); everything else
(``url_verification``, presses, slash commands, other events, and Socket Mode) goes
through slack-bolt, told not to verify again. Socket Mode requests come over the
authenticated socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog
from aiohttp import web
from slack_sdk.errors import SlackApiError

from adapters.base import (
    BadRequest,
    Check,
    EventSink,
    GatewayHooks,
    Hearing,
    Lock,
    NotStoredInTime,
    SenderLifecycle,
    heard,
)
from adapters.http import json_error, too_large
from adapters.payloads import load_form, load_json, same_secret
from adapters.slack.app_home import AppHome
from adapters.slack.parse import (
    check_request,
    is_home,
    parse_action,
    parse_command,
    parse_event,
    parse_reaction,
    parse_session_stop,
)
from adapters.slack.send import SlackSender
from agent_core.events import Platform
from agent_core.settings import Settings

log = structlog.get_logger("chatgate.slack")

# Slack gives up on a request after 3 s; leave room for the network.
ACK_SECONDS = 2.0


class SlackAdapter(SenderLifecycle[SlackSender]):
    """The Events API over HTTP when ``SLACK_SIGNING_SECRET`` is set, Socket Mode when
    ``SLACK_APP_TOKEN`` is (both may be)."""

    platform: Platform = "slack"

    def __init__(self, settings: Settings, hooks: GatewayHooks | None = None) -> None:
        assert settings.slack_bot_token is not None
        self.sender = SlackSender(
            settings.slack_bot_token.get_secret_value(),
            base_url=settings.slack_api_url,
            faults=hooks.faults if hooks is not None else None,
        )
        self._settings = settings
        self._hooks = hooks
        secret = settings.slack_signing_secret
        self._signing_secret = secret.get_secret_value() if secret is not None else None
        self._lock: Lock | None = None
        self.hearing = Hearing()
        self._bolt_app: Any = None
        self._home = (
            AppHome(self.sender, hooks.home, settings.slack_suggested_prompts)
            if hooks is not None and hooks.home is not None
            else None
        )

    def _bolt(self, sink: EventSink) -> Any:
        """One bolt app for HTTP and Socket Mode alike."""
        if self._bolt_app is None:
            self._bolt_app = build_bolt(self.sender, heard(sink, self.hearing), home=self._home)
        return self._bolt_app

    def mount(self, router: web.UrlDispatcher, sink: EventSink) -> None:
        """``POST /slack/events``, when Slack is to use the Events API."""
        if self._signing_secret is None:
            return
        secret = self._signing_secret
        bolt = self._bolt(sink)
        direct = heard(sink, self.hearing)

        async def events(request: web.Request) -> web.StreamResponse:
            """Everything Slack sends: the signature checked (401), ``url_verification``
            answered, our listeners run before the answer."""
            if (refused := too_large(request)) is not None:
                return refused
            from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

            # The signature is over the bytes, so a body that is not UTF-8 is refused
            # after it, never decoded before.
            raw = await request.read()
            if not signed(request.headers, raw, secret):
                self._rejected()
                return json_error(401, "invalid request signature")
            try:
                if request.content_type == "application/json":
                    body = load_json(raw)
                    if (answered := await self._message(body, direct)) is not None:
                        return answered
                    check_request(body)
                else:
                    form = load_form(raw)
                    if "payload" in form:
                        check_request(load_json(form["payload"].encode()), form=form)
                    else:
                        check_request(None, form=form)
                parsed = await to_bolt_request(request)
            except (BadRequest, ValueError, TypeError, KeyError):
                # (bolt's request parsing raises the last two on shapes it does not expect)
                return json_error(
                    400, "body is not what Slack sends (JSON, or a form with payload)"
                )
            response = await bolt.async_dispatch(parsed)
            result: web.StreamResponse = await to_aiohttp_response(response)
            return result

        router.add_post("/slack/events", events)

    async def _message(self, body: object, sink: EventSink) -> web.Response | None:
        """A message event (``app_mention``, ``message``) or a reaction (``reaction_added``,
        ``reaction_removed``) handled without bolt: the body is parsed and signed already,
        and these need none of bolt's listeners or middleware (the bot's own messages and
        reactions are dropped by the parsers, from ``auth.test``'s bot user, as bolt's
        authorization learns it). None for anything else: bolt's.

        200 once the message is in the ledger (or ignored) or the rating kept; 500 when the
        database was too slow (Slack delivers it again), or while ``auth.test`` fails (bolt
        would answer 200 there and lose the message). ``BadRequest`` for a malformed one."""
        if not isinstance(body, dict) or body.get("type") != "event_callback":
            return None
        event = body.get("event")
        if not isinstance(event, dict):
            raise BadRequest("an event_callback without an event object")
        kind = event.get("type")
        if kind not in ("app_mention", "message", "reaction_added", "reaction_removed"):
            return None
        try:
            bot_user, _bot = await self.sender.identity()
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("slack auth.test failed; Slack delivers the event again", error=str(exc))
            return json_error(500, "cannot tell the bot's own messages apart yet; try again")
        parsed = (
            parse_reaction(body, bot_user=bot_user or None)
            if kind in ("reaction_added", "reaction_removed")
            else parse_event(body, bot_user=bot_user or None)
        )
        if parsed is not None:
            try:
                await sink(parsed, deadline=ACK_SECONDS)
            except NotStoredInTime:
                return json_error(500, "not stored in time; deliver it again")
        return web.Response()

    async def finish(self) -> None:
        """Let the App Home publishes under way finish."""
        if self._home is not None:
            await self._home.drain()

    def _rejected(self) -> None:
        if self._hooks is not None:
            self._hooks.rejected("slack")

    async def run(self, sink: EventSink, stopping: asyncio.Event) -> None:
        """Socket Mode, when ``SLACK_APP_TOKEN`` is set: one socket at a time across
        gateways (Slack would spread events over all of them)."""
        token = self._settings.slack_app_token
        if token is None:
            return
        assert self._hooks is not None, "receiving needs the gateway's hooks"
        bolt = self._bolt(sink)
        app_token = token.get_secret_value()

        async def session() -> None:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler: Any = AsyncSocketModeHandler(bolt, app_token)
            self.hearing.connected = False
            try:
                await handler.connect_async()
                self.hearing.connected_now()
                log.info("slack socket mode connected")
                await self._watch(handler.client, stopping)
            finally:
                self.hearing.released()
                await handler.close_async()

        self._lock = self._hooks.lock("slack-socket")
        await self._lock.serve(session, stopping)

    async def _watch(self, client: Any, stopping: asyncio.Event) -> None:
        """Until ``stopping``: every second, is the socket still up? slack_sdk pings every
        5 s and reconnects a socket that is closed or stopped answering (a connection cut
        without a close frame shows as failing pings); this says so meanwhile."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await stopping.wait()
            if stopping.is_set():
                return
            up = await client.is_connected()
            if up and self.hearing.connected is False:
                log.info("slack socket mode reconnected")
                self.hearing.connected_now()
            elif not up and self.hearing.connected:
                log.warning("slack socket mode connection lost; reconnecting")
                self.hearing.disconnected("slack: Socket Mode disconnected (reconnecting)")

    def ready(self) -> str | None:
        """Not ready while this process holds the socket's lock and has not connected yet.
        A socket lost later is deafness, not unreadiness (``hearing``): this process still
        serves everything else, and no other one could hold the socket meanwhile."""
        holding = self._lock is not None and self._lock.holding
        first = self.hearing.connected is False and self.hearing.deaf_since is None
        return "slack: Socket Mode not connected yet" if holding and first else None

    async def check(self) -> Check:
        """``auth.test`` and the granted scopes (``chatgate doctor``)."""
        from adapters.slack.setup import check

        return await check(self._settings)


def signed(headers: Any, body: bytes, secret: str) -> bool:
    """Slack's v0 signature over the raw bytes, within five minutes (as slack_sdk checks
    it, without decoding the body first)."""
    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not re.fullmatch(r"[0-9]{1,12}", timestamp) or abs(time.time() - int(timestamp)) > 300:
        return False
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return same_secret(signature, expected)


def build_bolt(sender: SlackSender, sink: EventSink, *, home: AppHome | None = None) -> Any:
    """The slack-bolt app: it answers ``url_verification``, drops the bot's own events,
    and hands ours to ``sink``.

    It answers Slack only after a listener returns (``process_before_response``): an event
    is in the ingress ledger before Slack hears 200 (or at the deadline), so an ack is
    never a lost message; the turn itself runs after the ack. A press is acknowledged
    first and decided right after (Slack does not retry presses; a person can press
    again); a refusal is an ephemeral message to the presser.
    """
    from slack_bolt.async_app import AsyncApp

    bolt = AsyncApp(
        client=sender.client,
        # Verified before bolt sees a request (HTTP), or not needed (Socket Mode).
        request_verification_enabled=False,
        process_before_response=True,
        raise_error_for_unhandled_request=False,
    )

    async def event(body: dict[str, Any], context: dict[str, Any]) -> None:
        parsed = parse_event(body, bot_user=context.get("bot_user_id"))
        if parsed is not None:
            await sink(parsed, deadline=ACK_SECONDS)

    async def action(ack: Callable[[], Awaitable[None]], body: dict[str, Any]) -> None:
        await ack()
        if is_home(body):
            if home is not None:
                home.pressed(body, sink)
            return
        press = parse_action(body)
        if press is None:
            return

        async def refuse(text: str) -> None:
            await sender.ephemeral(press.conversation, press.user, text)

        if home is not None and home.knows(press.user):
            home.press_elsewhere(press, sink, refuse)
            return
        await sink(press, deadline=0, refuse=refuse)

    async def command(ack: Callable[[], Awaitable[None]], command: dict[str, str]) -> None:
        await ack()
        parsed = parse_command(command)
        if parsed.raw.get("unknown"):
            log.warning(
                "slack slash command not in the registry; the app's manifest is from "
                "another version (chatgate slack manifest)",
                command=parsed.raw.get("command"),
            )
        # Slack never delivers a command again: acknowledged, it is stored in the
        # background even past the deadline (an event past it is answered 500 instead,
        # by bolt, so Slack retries it).
        with contextlib.suppress(NotStoredInTime):
            await sink(parsed, deadline=ACK_SECONDS)

    async def home_opened(body: dict[str, Any]) -> None:
        """The person opened the App Home: publish it (after the answer to Slack)."""
        if home is not None:
            home.opened(body)

    async def reaction(body: dict[str, Any], context: dict[str, Any]) -> None:
        """👍/👎 on the bot's reply (Socket Mode; over HTTP they come the direct way): a
        rating, kept by the deadline."""
        parsed = parse_reaction(body, bot_user=context.get("bot_user_id"))
        if parsed is not None:
            await sink(parsed, deadline=ACK_SECONDS)

    async def session_stopped(body: dict[str, Any]) -> None:
        """Slack's Stop button on the agent's session: the thread's turn stops as for
        ``/stop`` (the session leaves ``processing`` when the stopped turn ends, which it
        does at its next step boundary: a model call is raced against the stop). A Stop by
        someone who may not talk there, or with nothing running, changes nothing."""
        press = parse_session_stop(body)
        if press is None:
            return

        async def refuse(text: str) -> None:
            await sender.ephemeral(press.conversation, press.user, text)

        await sink(press, deadline=0, refuse=refuse)

    async def ignore(body: dict[str, Any]) -> None:
        """Other event types: acknowledged so Slack does not retry them."""

    bolt.event("app_mention")(event)
    bolt.event("message")(event)
    bolt.event("reaction_added")(reaction)
    bolt.event("reaction_removed")(reaction)
    bolt.event("app_home_opened")(home_opened)
    bolt.event("agent_session_stopped")(session_stopped)
    bolt.event(re.compile(".*"))(ignore)
    bolt.action(re.compile("^chatgate_"))(action)
    bolt.command(re.compile(".*"))(command)
    return bolt
