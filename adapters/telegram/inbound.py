"""Telegram's inbound side: ``POST /telegram/webhook`` when ``TELEGRAM_WEBHOOK_SECRET`` is
set, long polling otherwise.

Polling is our own ``getUpdates`` loop, not PTB's ``Updater``: PTB confirms a batch (the next
call's ``offset``) as soon as it is queued, before handlers run, so a crash loses it. Ours
asks for the next batch only once every update of this one is in the ingress ledger; after
a crash Telegram sends the unconfirmed ones again and the ledger drops the duplicates. An
update that cannot be handled (malformed, or failing while the database answers) is set
aside as a dead letter, so one bad update does not stop the bot.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Mapping
from typing import Any

import structlog
from aiohttp import web

from adapters.base import (
    BadRequest,
    Check,
    EventSink,
    GatewayHooks,
    Hearing,
    NotStoredInTime,
    SenderLifecycle,
)
from adapters.http import json_error, too_large
from adapters.payloads import check, load_json, same_secret
from adapters.telegram.parse import ALLOWED_UPDATES, BotIdentity, parse_update
from adapters.telegram.send import TelegramSender, retry_seconds
from agent_core.events import ButtonPress, InboundMessage, MessageEdited, Platform, Reaction
from agent_core.settings import Settings

log = structlog.get_logger("chatgate.telegram")

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# getUpdates holds the request open this long when there is nothing new.
POLL_SECONDS = 25
# Telegram gives up on a webhook call after about a minute; answer well before that.
ACK_SECONDS = 10.0
_BACKOFF_SECONDS = (1, 2, 5, 10, 30)
# Failures (with the database answering) after which an update is set aside.
_ATTEMPTS = 3


class TelegramAdapter(SenderLifecycle[TelegramSender]):
    """Updates from the webhook or from polling, handed to the gateway's sink."""

    platform: Platform = "telegram"

    def __init__(self, settings: Settings, hooks: GatewayHooks | None = None) -> None:
        assert settings.telegram_bot_token is not None
        self.sender = TelegramSender(
            settings.telegram_bot_token.get_secret_value(),
            base_url=settings.telegram_api_url,
            faults=hooks.faults if hooks is not None else None,
        )
        self._settings = settings
        self._hooks = hooks
        secret = settings.telegram_webhook_secret
        self.secret = secret.get_secret_value() if secret is not None else None
        self.identity: BotIdentity | None = None
        # Failures of updates that are retried, by update id.
        self._attempts: dict[int, int] = {}
        self.hearing = Hearing()
        self._background: set[asyncio.Task[None]] = set()

    async def finish(self) -> None:
        """Let the callback answers still on their way go out."""
        if self._background:
            await asyncio.wait(set(self._background))

    def mount(self, router: web.UrlDispatcher, sink: EventSink) -> None:
        """``POST /telegram/webhook``, when a webhook secret is set (in polling mode the
        route does not exist)."""
        if self.secret is None:
            return
        secret = self.secret

        async def webhook(request: web.Request) -> web.StreamResponse:
            """One update: the secret header checked in constant time (401 and nothing
            stored when wrong), the update stored, 200."""
            if (refused := too_large(request)) is not None:
                return refused
            if not same_secret(request.headers.get(SECRET_HEADER, ""), secret):
                if self._hooks is not None:
                    self._hooks.rejected("telegram")
                return json_error(401, "wrong or missing X-Telegram-Bot-Api-Secret-Token")
            try:
                update = load_json(await request.read())
            except BadRequest as exc:
                return json_error(400, str(exc))
            if not isinstance(update, dict):
                return json_error(400, "an update is a JSON object")
            if self.identity is None:
                return json_error(503, "not connected to Telegram yet")
            try:
                await self.handle(update, sink, deadline=ACK_SECONDS)
            except BadRequest as exc:
                return json_error(400, str(exc))
            except NotStoredInTime:
                # Not received as far as Telegram knows: it delivers the update again.
                return json_error(503, "the update could not be stored in time")
            return web.json_response({"ok": True})

        router.add_post("/telegram/webhook", webhook)

    async def handle(
        self, update: Mapping[str, Any], sink: EventSink, *, deadline: float | None
    ) -> None:
        """Store or act on one update; ``BadRequest`` when it is not an update."""
        assert self.identity is not None
        self.hearing.heard()
        event = parse_update(update, bot=self.identity)
        if isinstance(event, InboundMessage | Reaction | MessageEdited):
            await sink(event, deadline=deadline)
        elif isinstance(event, ButtonPress):
            await self._press(event, sink, deadline=deadline)
        else:
            callback = update.get("callback_query")
            if isinstance(callback, Mapping) and isinstance(callback.get("id"), str):
                # Not one of our buttons: still answered, or the client spins for a while.
                self._later(self.sender.answer(callback["id"]))

    async def _press(self, press: ButtonPress, sink: EventSink, *, deadline: float | None) -> None:
        """Decide; the spinner stops with the refusal as an alert, or silently."""
        query = str(press.raw.get("callback_query_id", ""))
        refused = False

        async def refuse(text: str) -> None:
            nonlocal refused
            refused = True
            await self.sender.answer(query, text, alert=True)

        async def decide() -> None:
            try:
                await sink(press, refuse=refuse)
            finally:
                if not refused:
                    await self.sender.answer(query)

        done = self._later(decide())
        await asyncio.wait({done}, timeout=deadline)

    def _later(self, work: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def run(self, sink: EventSink, stopping: asyncio.Event) -> None:
        """Connect: ``getMe`` (retried while Telegram does not answer; the webhook answers
        503 meanwhile, so Telegram sends again), then poll when no webhook secret is set
        (one poller at a time: Telegram answers a second ``getUpdates`` with a conflict)."""
        from telegram.error import InvalidToken, TelegramError

        for attempt in itertools.count():
            try:
                self.identity = await self.sender.identify()
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
        assert self.identity is not None
        log.info("telegram connected", bot=self.identity.username, webhook=self.secret is not None)
        self._later(self._sync_menus())
        if self.secret is None:
            assert self._hooks is not None, "polling needs the gateway's hooks"
            lock = self._hooks.lock("telegram-polling")
            await lock.serve(lambda: self._polling(sink, stopping), stopping)
        else:
            await self.watch_webhook(stopping)

    async def _sync_menus(self) -> None:
        """Set the command menus where Telegram's differ from the registry's (one
        ``getMyCommands`` per scope at start; ``setMyCommands`` only where they differ)."""
        from telegram.error import TelegramError

        from adapters.telegram.setup import push_menus

        try:
            pushed = await push_menus(self.sender, only_drifted=True)
        except TelegramError as exc:
            log.warning("telegram command menus not set", error=str(exc))
            return
        if pushed:
            log.info("telegram command menus set", scopes=pushed)

    async def watch_webhook(self, stopping: asyncio.Event) -> None:
        """Webhook mode: every ``CHATGATE_DEAF_CHECK_SECONDS``, ask Telegram how many
        updates wait for us. Updates waiting while none arrived here for that long is
        deafness (the webhook points elsewhere, or its deliveries fail: Telegram's last
        error says which); it ends as soon as one arrives or none wait."""
        from telegram.error import TelegramError

        every = self._settings.deaf_check_seconds
        started = time.time()
        while not stopping.is_set():
            await _sleep(stopping, every)
            if stopping.is_set():
                return
            try:
                info = await self.sender.bot.get_webhook_info()
            except TelegramError as exc:
                log.warning("telegram getWebhookInfo failed", error=str(exc))
                continue
            last = self.hearing.last_event_at or started
            if info.pending_update_count and time.time() - last >= every:
                # Telegram's error text goes to the log only: /readyz is public.
                if self.hearing.deaf_since is None:
                    log.warning(
                        "telegram updates wait and none arrive",
                        pending=info.pending_update_count,
                        webhook=info.url,
                        last_error=info.last_error_message,
                    )
                self.hearing.silent(
                    f"telegram: {info.pending_update_count} updates wait at Telegram and "
                    f"none arrived for {int(time.time() - last)} s (the log has Telegram's "
                    "last error)"
                )
            else:
                self.hearing.hears()

    async def _polling(self, sink: EventSink, stopping: asyncio.Event) -> None:
        self.hearing.connected = False
        try:
            await self.poll(sink, stopping)
        finally:
            self.hearing.released()

    async def poll(self, sink: EventSink, stopping: asyncio.Event) -> None:
        """Long polling until ``stopping``: each batch is confirmed only after it is stored."""
        from telegram.error import Conflict, InvalidToken, RetryAfter, TelegramError

        assert self._hooks is not None
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
                self.hearing.disconnected(f"telegram: getUpdates failing ({type(exc).__name__})")
                await _sleep(stopping, wait)
                continue
            failures = 0
            if not self.hearing.connected:
                self.hearing.connected_now()
            if updates:
                self._hooks.faults.hit("after_get_updates")
            for update in updates:
                data = update.to_dict()
                try:
                    check(data)
                    await self.handle(data, sink, deadline=None)
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
        assert self._hooks is not None
        log.error("handling a telegram update failed", update_id=update_id, error=repr(exc))
        self._attempts[update_id] = attempts = self._attempts.get(update_id, 0) + 1
        if attempts < _ATTEMPTS or not await self._hooks.database_up():
            return False  # or the database is down: nothing is wrong with the update
        return await self._set_aside(update_id, data, f"{type(exc).__name__}: {exc}")

    async def _set_aside(self, update_id: int, data: Mapping[str, Any], error: str) -> bool:
        """Keep the update as a dead letter so polling moves on; False when even that
        cannot be stored."""
        assert self._hooks is not None
        if not await self._hooks.set_aside("telegram", str(update_id), data, error):
            return False
        self._attempts.pop(update_id, None)
        return True

    def ready(self) -> str | None:
        """Not ready until ``getMe`` answered. Deafness later (``hearing``) is reported,
        not unreadiness: Telegram's pending count is the same for every gateway, and a
        503 from all of them would leave nothing to deliver to once the cause is fixed."""
        return None if self.identity else "telegram: not connected yet (getMe)"

    async def check(self) -> Check:
        """``getMe`` and ``getWebhookInfo`` against the mode the settings ask for."""
        from adapters.telegram.setup import check

        return await check(self._settings, self.sender)


async def _sleep(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stopping.wait()
