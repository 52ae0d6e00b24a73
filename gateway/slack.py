"""Slack in the gateway: ``POST /slack/events`` (Events API, interactivity and the slash
command on one Request URL) through slack-bolt, wired to the dispatcher."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from agent_core.errors import ApprovalError, ScheduleActionError
from agent_core.events import ButtonPress, Edit, InboundMessage
from agent_core.settings import Settings
from gateway.dispatch import refusal
from gateway.routes import MAX_BODY, json_error
from gateway.runtime import RUNTIME

if TYPE_CHECKING:
    from adapters.slack import SlackSender

log = structlog.get_logger("chatgate.slack")

_VERBS = ("pause", "resume", "delete")
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

    background: set[asyncio.Future[Any]] = set()

    def _finished(work: asyncio.Future[Any]) -> None:
        background.discard(work)
        if not work.cancelled() and work.exception() is not None:
            log.error("handling a Slack message failed", exc_info=work.exception())

    async def on_message(event: InboundMessage) -> None:
        runtime = app[RUNTIME]
        # A reply in a thread is answered only where the agent already talks.
        known = mentions_bot(event) or await runtime.store.conversation_id_for(event.conversation)
        if not known:
            return
        # The ledger write comes first and takes milliseconds; a command's answer may wait
        # on Slack (a 429). Slack wants its 200 within 3 s: answer by then whatever is left.
        work = asyncio.ensure_future(runtime.dispatcher.accept(event))
        background.add(work)
        work.add_done_callback(_finished)
        await asyncio.wait({work}, timeout=ACK_SECONDS)
        if work.done():
            # Failed before it was stored (the database is down): answer Slack with an
            # error, so it delivers the event again later instead of losing it.
            work.result()

    async def on_press(press: ButtonPress) -> None:
        runtime = app[RUNTIME]
        if not press.approval_id:
            await on_job_press(press)
            return
        try:
            await runtime.dispatcher.decide(
                press.approval_id,
                decision=press.action,  # type: ignore[arg-type]
                user=press.user,
            )
        except ApprovalError as exc:
            await sender.ephemeral(press.conversation, press.user, refusal(exc))
        except Exception:
            log.exception("deciding a button press failed", approval_id=press.approval_id)

    async def on_job_press(press: ButtonPress) -> None:
        """Pause, resume or delete from a ``jobs`` listing, then redraw it in place."""
        runtime = app[RUNTIME]
        conversation_id = await runtime.store.conversation_id_for(press.conversation)
        if conversation_id is None or not press.value or press.action not in _VERBS:
            return
        try:
            await runtime.dispatcher.change_schedule(
                press.value,
                press.action,  # type: ignore[arg-type]
                user=press.user,
                conversation_id=conversation_id,
            )
        except ScheduleActionError as exc:
            await sender.ephemeral(press.conversation, press.user, f"{exc}.")
            return
        if press.message is not None:
            text, payload = await runtime.dispatcher.jobs_listing(conversation_id)
            await sender.edit(
                Edit(
                    message=press.message,
                    text=text,
                    payload=payload,
                    idempotency_key=f"{press.platform_event_id}:listing",
                )
            )

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

        async def connect(app: web.Application) -> None:
            from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

            handler: Any = AsyncSocketModeHandler(bolt, app_token)
            await handler.connect_async()
            connected.append(handler)
            log.info("slack socket mode connected")

        async def disconnect(app: web.Application) -> None:
            for handler in connected:
                await handler.close_async()

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
    # and a malformed timestamp header makes its verifier raise.
    if not _signed(request, await request.text(), slack.signing_secret):
        request.app[RUNTIME].dispatcher.reject("slack")
        return json_error(401, "invalid request signature")
    try:
        parsed = await to_bolt_request(request)
    except ValueError:
        return json_error(400, "body is not what Slack sends (JSON, or a form with payload)")
    response = await slack.bolt.async_dispatch(parsed)
    if response.status == 401:
        request.app[RUNTIME].dispatcher.reject("slack")
    result: web.StreamResponse = await to_aiohttp_response(response)
    return result


def _signed(request: web.Request, body: str, secret: str) -> bool:
    from slack_sdk.signature import SignatureVerifier

    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not timestamp.isdigit() or not signature:
        return False
    return SignatureVerifier(secret).is_valid(body=body, timestamp=timestamp, signature=signature)


def add_routes(app: web.Application) -> None:
    """Register the Slack route."""
    app.router.add_post("/slack/events", events)
