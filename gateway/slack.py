"""Slack in the gateway: ``POST /slack/events`` (Events API, interactivity and the slash
command on one Request URL) through slack-bolt, wired to the dispatcher."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from adapters.base import BadRequest
from adapters.payloads import load_form, load_json, same_secret
from agent_core.events import ButtonPress, InboundMessage
from agent_core.settings import Settings
from gateway.inbound import Acceptor, act_on_press
from gateway.routes import MAX_BODY, add_platform_check, json_error
from gateway.runtime import RUNTIME
from gateway.singleton import Holder

if TYPE_CHECKING:
    from adapters.slack import SlackSender

log = structlog.get_logger("chatgate.slack")

# Slack gives up on a request after 3 s; leave room for the network.
ACK_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class SlackHttp:
    """What ``POST /slack/events`` needs: the bolt app and the signing secret."""

    bolt: Any
    signing_secret: str


SLACK_HTTP = web.AppKey("slack_http", SlackHttp)


def attach(app: web.Application, settings: Settings, sender: SlackSender) -> None:
    """Build the bolt app: the Events API over HTTP when ``SLACK_SIGNING_SECRET`` is set,
    Socket Mode when ``SLACK_APP_TOKEN`` is (both may be)."""
    secret = settings.slack_signing_secret
    if secret is None and settings.slack_app_token is None:
        return
    from adapters.slack import build_bolt, mentions_bot

    acceptor = Acceptor(ACK_SECONDS)

    async def on_message(event: InboundMessage) -> None:
        runtime = app[RUNTIME]
        # A reply in a thread is answered only where the agent already talks.
        known = mentions_bot(event) or await runtime.store.conversation_id_for(event.conversation)
        if known:
            await acceptor.accept(runtime, event)

    async def on_press(press: ButtonPress) -> None:
        async def refuse(text: str) -> None:
            await sender.ephemeral(press.conversation, press.user, text)

        await act_on_press(app[RUNTIME], press, refuse=refuse, edit=sender.edit)

    bolt = build_bolt(
        sender,
        signing_secret=secret.get_secret_value() if secret is not None else None,
        on_message=on_message,
        on_press=on_press,
    )
    if secret is not None:
        app[SLACK_HTTP] = SlackHttp(bolt, secret.get_secret_value())
    if settings.slack_app_token is not None:
        app_token = settings.slack_app_token.get_secret_value()
        connected: list[Any] = []

        async def socket_session() -> None:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler: Any = AsyncSocketModeHandler(bolt, app_token)
            try:
                await handler.connect_async()
                connected.append(handler)
                log.info("slack socket mode connected")
                await app[RUNTIME].stopping.wait()
            finally:
                connected.clear()
                await handler.close_async()

        holders: list[Holder] = []
        sessions: list[asyncio.Task[None]] = []

        async def connect(app: web.Application) -> None:
            # One socket at a time across gateways: Slack would spread events over all.
            runtime = app[RUNTIME]
            holder = Holder(
                runtime.store, "slack-socket", owner=runtime.owner, ttl=settings.lease_seconds
            )
            holders.append(holder)
            sessions.append(
                asyncio.create_task(holder.serve(socket_session, runtime.stopping), name="slack")
            )

        async def disconnect(app: web.Application) -> None:
            for session in sessions:
                session.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await session

        def ready() -> str | None:
            holding = any(h.holding for h in holders)
            return "slack: Socket Mode not connected yet" if holding and not connected else None

        add_platform_check(app, ready)
        app.on_startup.append(connect)
        app.on_shutdown.append(disconnect)


async def events(request: web.Request) -> web.StreamResponse:
    """Everything Slack sends: bolt checks the signature (401), answers url_verification,
    and runs our listeners before it answers."""
    slack = request.app.get(SLACK_HTTP)
    if slack is None:
        return json_error(
            404, "Slack over HTTP is not configured (SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET)"
        )
    if request.content_length is not None and request.content_length > MAX_BODY:
        return json_error(413, f"body larger than {MAX_BODY} bytes")
    from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

    # Checked here before bolt sees the request: bolt parses the body before it verifies,
    # and a malformed timestamp header makes its verifier raise. The signature is over the
    # bytes, so a body that is not UTF-8 is refused after it, never decoded before.
    raw = await request.read()
    if not _signed(request, raw, slack.signing_secret):
        request.app[RUNTIME].dispatcher.reject("slack")
        return json_error(401, "invalid request signature")
    try:
        if request.content_type == "application/json":
            load_json(raw)
        else:
            form = load_form(raw)
            if "payload" in form:
                load_json(form["payload"].encode())
        parsed = await to_bolt_request(request)
    except (BadRequest, ValueError):
        return json_error(400, "body is not what Slack sends (JSON, or a form with payload)")
    response = await slack.bolt.async_dispatch(parsed)
    if response.status == 401:
        request.app[RUNTIME].dispatcher.reject("slack")
    result: web.StreamResponse = await to_aiohttp_response(response)
    return result


def _signed(request: web.Request, body: bytes, secret: str) -> bool:
    """Slack's v0 signature over the raw bytes, within five minutes (as slack_sdk checks
    it, without decoding the body first)."""
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not re.fullmatch(r"[0-9]{1,12}", timestamp) or abs(time.time() - int(timestamp)) > 300:
        return False
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return same_secret(signature, expected)


def add_routes(app: web.Application) -> None:
    """Register the Slack route."""
    app.router.add_post("/slack/events", events)
