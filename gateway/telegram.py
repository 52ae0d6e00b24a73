"""Telegram in the gateway: ``POST /telegram/webhook`` when ``TELEGRAM_WEBHOOK_SECRET`` is
set, long polling otherwise, both wired to the dispatcher.

Polling is our own ``getUpdates`` loop, not PTB's ``Updater``: PTB confirms a batch (the next
call's ``offset``) as soon as it is queued, before handlers run, so a crash loses it. Ours
asks for the next batch only once every update of this one is in the ingress ledger; after
a crash Telegram sends the unconfirmed ones again and the ledger drops the duplicates.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from adapters.base import BadRequest
from adapters.payloads import check, load_json, same_secret
from agent_core.events import ButtonPress, InboundMessage
from agent_core.faults import FaultPoints
from agent_core.settings import Settings
from gateway.inbound import Acceptor, act_on_press
from gateway.routes import MAX_BODY, add_platform_check, json_error
from gateway.runtime import RUNTIME
from gateway.singleton import Holder

if TYPE_CHECKING:
    from adapters.telegram import BotIdentity, TelegramSender

log = structlog.get_logger("chatgate.telegram")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# getUpdates holds the request open this long when there is nothing new.
POLL_SECONDS = 25
# Telegram gives up on a webhook call after about a minute; answer well before that.
ACK_SECONDS = 10.0
_BACKOFF_SECONDS = (1, 2, 5, 10, 30)
# Failures (with the database answering) after which an update is set aside.
_ATTEMPTS = 3


class TelegramGateway:
    """Turns updates (from the webhook or from polling) into dispatcher calls."""

    def __init__(self, app: web.Application, settings: Settings, sender: TelegramSender) -> None:
        self._app = app
        self.sender = sender
        secret = settings.telegram_webhook_secret
        self.secret = secret.get_secret_value() if secret is not None else None
        # Webhook: answer by Telegram's deadline. Polling: wait until stored, however long,
        # since the next getUpdates confirms the batch.
        self._webhook = Acceptor(ACK_SECONDS)
        self._polled = Acceptor(None)
        self.identity: BotIdentity | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._faults = FaultPoints(settings.test_fault)
        # Failures of updates that are retried, by update id.
        self._attempts: dict[int, int] = {}

    async def handle(self, update: Mapping[str, Any], *, polled: bool = False) -> None:
        """Store or act on one update; ``BadRequest`` when it is not an update."""
        from adapters.telegram import parse_update

        assert self.identity is not None
        runtime = self._app[RUNTIME]
        event = parse_update(update, bot=self.identity)
        acceptor = self._polled if polled else self._webhook
        if isinstance(event, InboundMessage):
            await acceptor.accept(runtime, event)
        elif isinstance(event, ButtonPress):
            await acceptor.within_deadline(self._press(event))
        else:
            callback = update.get("callback_query")
            if isinstance(callback, Mapping) and isinstance(callback.get("id"), str):
                # Not one of our buttons: still answered, or the client spins for a while.
                acceptor.run(self.sender.answer(callback["id"]))

    async def _press(self, press: ButtonPress) -> None:
        query = str(press.raw.get("callback_query_id", ""))
        refused = False

        async def refuse(text: str) -> None:
            nonlocal refused
            refused = True
            await self.sender.answer(query, text, alert=True)

        try:
            await act_on_press(self._app[RUNTIME], press, refuse=refuse, edit=self.sender.edit)
        finally:
            if not refused:
                await self.sender.answer(query)

    async def poll(self, stopping: asyncio.Event) -> None:
        """Long polling until ``stopping``: each batch is confirmed only after it is stored."""
        from telegram.error import Conflict, InvalidToken, RetryAfter, TelegramError

        from adapters.telegram import ALLOWED_UPDATES, retry_seconds

        bot = self.sender.bot
        failures = 0
        offset: int | None = None
        while not stopping.is_set():
            try:
                # A webhook and getUpdates exclude each other; polling mode means no webhook.
                if offset is None:
                    await bot.delete_webhook(drop_pending_updates=False)
                updates = await bot.get_updates(
                    offset=offset, timeout=POLL_SECONDS, allowed_updates=list(ALLOWED_UPDATES)
                )
            except RetryAfter as exc:
                await _sleep(stopping, retry_seconds(exc))
                continue
            except InvalidToken:
                log.error("telegram rejected TELEGRAM_BOT_TOKEN; polling stopped")
                return
            except (Conflict, TelegramError) as exc:
                wait = _BACKOFF_SECONDS[min(failures, len(_BACKOFF_SECONDS) - 1)]
                failures += 1
                log.warning("telegram getUpdates failed", error=str(exc), retry_in=wait)
                await _sleep(stopping, wait)
                continue
            failures = 0
            if updates:
                self._faults.hit("after_get_updates")
            for update in updates:
                data = update.to_dict()
                try:
                    check(data)
                    await self.handle(data, polled=True)
                except BadRequest as exc:
                    if not await self._set_aside(update.update_id, data, str(exc)):
                        await _sleep(stopping, 1)
                        break
                except Exception as exc:
                    if not await self._failed(update.update_id, data, exc):
                        # Not stored (the database is down?): ask for it again, from here.
                        await _sleep(stopping, 1)
                        break
                offset = update.update_id + 1

    async def _failed(self, update_id: int, data: Mapping[str, Any], exc: Exception) -> bool:
        """An update failed: True when it is set aside (it failed ``_ATTEMPTS`` times while
        the database answered, so retrying will not mend it), False to retry it."""
        log.error("handling a telegram update failed", update_id=update_id, error=repr(exc))
        self._attempts[update_id] = attempts = self._attempts.get(update_id, 0) + 1
        if attempts < _ATTEMPTS:
            return False
        try:
            await self._app[RUNTIME].store.database.ping()
        except Exception:
            return False  # the database is down: nothing is wrong with the update
        return await self._set_aside(update_id, data, f"{type(exc).__name__}: {exc}")

    async def _set_aside(self, update_id: int, data: Mapping[str, Any], error: str) -> bool:
        """Keep the update as a dead letter (metric, log line) so polling moves on; False
        when even that cannot be stored."""
        runtime = self._app[RUNTIME]
        try:
            await runtime.store.dead_letter(
                platform="telegram", event_id=str(update_id), raw=dict(data), error=error
            )
        except Exception:
            log.exception("could not set a telegram update aside", update_id=update_id)
            return False
        self._attempts.pop(update_id, None)
        runtime.metrics.dead_letters.labels("telegram").inc()
        log.error("telegram update set aside as dead", update_id=update_id, error=error)
        return True

    async def start(self, app: web.Application) -> None:
        """Connect in the background: ``getMe`` (retried while Telegram does not answer;
        the webhook answers 503 meanwhile, so Telegram sends again), then polling when no
        webhook secret is set."""
        self._connecting = asyncio.create_task(
            self._connect(app[RUNTIME].stopping), name="telegram-connect"
        )

    async def _connect(self, stopping: asyncio.Event) -> None:
        from telegram.error import InvalidToken, TelegramError

        identity: BotIdentity | None = None
        for attempt in itertools.count():
            try:
                identity = await self.sender.identify()
                break
            except InvalidToken:
                log.error("telegram rejected TELEGRAM_BOT_TOKEN; run chatgate doctor")
                return
            except TelegramError as exc:
                wait = _BACKOFF_SECONDS[min(attempt, len(_BACKOFF_SECONDS) - 1)]
                log.warning("telegram getMe failed", error=str(exc), retry_in=wait)
                await _sleep(stopping, wait)
                if stopping.is_set():
                    return
        assert identity is not None
        self.identity = identity
        log.info("telegram connected", bot=identity.username, webhook=self.secret is not None)
        if self.secret is None:
            # One poller at a time: Telegram answers a second getUpdates with a conflict.
            runtime = self._app[RUNTIME]
            holder = Holder(
                runtime.store,
                "telegram-polling",
                owner=runtime.owner,
                ttl=runtime.settings.lease_seconds,
            )
            await holder.serve(lambda: self.poll(stopping), stopping)

    async def stop(self, app: web.Application) -> None:
        """Stop polling (what was fetched and not stored is fetched again next time)."""
        if self._connecting is not None:
            self._connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connecting
        await self._webhook.drain()
        await self._polled.drain()


async def _sleep(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stopping.wait()


TELEGRAM = web.AppKey("telegram", TelegramGateway)


def attach(app: web.Application, settings: Settings, sender: TelegramSender) -> None:
    """Serve Telegram: the webhook route answers when a secret is set; polling otherwise."""
    telegram = TelegramGateway(app, settings, sender)
    app[TELEGRAM] = telegram
    add_platform_check(
        app, lambda: None if telegram.identity else "telegram: not connected yet (getMe)"
    )
    app.on_startup.append(telegram.start)
    app.on_shutdown.append(telegram.stop)


async def webhook(request: web.Request) -> web.StreamResponse:
    """One update from Telegram: the secret header checked in constant time (401 and
    nothing stored when wrong), the update stored, 200."""
    telegram = request.app.get(TELEGRAM)
    if telegram is None or telegram.secret is None:
        return json_error(
            404,
            "the Telegram webhook is not configured (TELEGRAM_BOT_TOKEN, TELEGRAM_WEBHOOK_SECRET)",
        )
    if request.content_length is not None and request.content_length > MAX_BODY:
        return json_error(413, f"body larger than {MAX_BODY} bytes")
    given = request.headers.get(SECRET_HEADER, "")
    if not same_secret(given, telegram.secret):
        request.app[RUNTIME].dispatcher.reject("telegram")
        return json_error(401, "wrong or missing X-Telegram-Bot-Api-Secret-Token")
    try:
        update = load_json(await request.read())
    except BadRequest as exc:
        return json_error(400, str(exc))
    if not isinstance(update, dict):
        return json_error(400, "an update is a JSON object")
    if telegram.identity is None:
        return json_error(503, "not connected to Telegram yet")
    try:
        await telegram.handle(update)
    except BadRequest as exc:
        return json_error(400, str(exc))
    return web.json_response({"ok": True})


def add_routes(app: web.Application) -> None:
    """Register the Telegram route."""
    app.router.add_post("/telegram/webhook", webhook)
