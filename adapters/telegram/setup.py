"""What ``chatgate doctor`` asks Telegram, and the webhook commands
(``chatgate telegram set-webhook`` and ``delete-webhook``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from adapters.base import Check, PlatformError, Unauthorized
from adapters.telegram.parse import ALLOWED_UPDATES
from adapters.telegram.send import TelegramSender
from agent_core.settings import Settings


async def check(settings: Settings, sender: TelegramSender) -> Check:
    """``getMe`` (the token), then ``getWebhookInfo`` against the mode the settings ask for."""
    from telegram.error import InvalidToken, TelegramError

    try:
        async with asyncio.timeout(10):
            identity = await sender.identify()
            info = await sender.bot.get_webhook_info()
    except InvalidToken:
        return Check(
            "telegram",
            "FAIL",
            "getMe: Telegram does not know this token",
            "copy the token BotFather gave into TELEGRAM_BOT_TOKEN (/token in BotFather)",
        )
    except (TelegramError, OSError, TimeoutError) as exc:
        return Check(
            "telegram",
            "FAIL",
            f"{settings.telegram_api_url}: {exc or 'timed out'}",
            "check TELEGRAM_API_URL and the network",
        )
    who = f"getMe ok as @{identity.username}"
    if settings.telegram_webhook_secret is None:
        if info.url:
            return Check(
                "telegram",
                "WARN",
                f"{who}; long polling, but a webhook is registered ({info.url}): the gateway "
                "removes it when it starts",
                "set TELEGRAM_WEBHOOK_SECRET to use the webhook, or "
                "`chatgate telegram delete-webhook`",
            )
        return Check("telegram", "ok", f"{who}; long polling (no webhook registered)")
    set_it = "chatgate telegram set-webhook https://YOUR.HOST/telegram/webhook"
    if not info.url:
        return Check(
            "telegram", "FAIL", f"{who}; webhook mode, but no webhook is registered", set_it
        )
    problems = []
    if not info.url.endswith("/telegram/webhook"):
        problems.append(f"the webhook is {info.url}, not chatgate's /telegram/webhook")
    wanted = set(ALLOWED_UPDATES)
    if info.allowed_updates and not wanted <= set(info.allowed_updates):
        problems.append(f"it is not sent {', '.join(sorted(wanted - set(info.allowed_updates)))}")
    if info.last_error_message:
        problems.append(f"Telegram's last delivery failed: {info.last_error_message}")
    if problems:
        return Check("telegram", "WARN", f"{who}; " + "; ".join(problems), set_it)
    pending = f", {info.pending_update_count} pending" if info.pending_update_count else ""
    return Check("telegram", "ok", f"{who}; webhook {info.url}{pending}")


async def set_webhook(settings: Settings, url: str, *, drop_pending: bool) -> None:
    """Point Telegram at ``url`` with ``TELEGRAM_WEBHOOK_SECRET`` and the updates chatgate
    reads."""
    secret = settings.telegram_webhook_secret
    assert secret is not None

    async def call(sender: TelegramSender) -> None:
        await sender.bot.set_webhook(
            url,
            secret_token=secret.get_secret_value(),
            allowed_updates=list(ALLOWED_UPDATES),
            drop_pending_updates=drop_pending,
        )

    await _call(settings, call)


async def delete_webhook(settings: Settings, *, drop_pending: bool) -> None:
    """Remove the webhook (the gateway long-polls then)."""

    async def call(sender: TelegramSender) -> None:
        await sender.bot.delete_webhook(drop_pending_updates=drop_pending)

    await _call(settings, call)


async def _call(settings: Settings, action: Callable[[TelegramSender], Awaitable[None]]) -> None:
    from telegram.error import InvalidToken, TelegramError

    assert settings.telegram_bot_token is not None
    sender = TelegramSender(
        settings.telegram_bot_token.get_secret_value(), base_url=settings.telegram_api_url
    )
    try:
        await action(sender)
    except InvalidToken as exc:
        raise Unauthorized(f"telegram: {exc}") from exc
    except TelegramError as exc:
        raise PlatformError(f"telegram: {exc}") from exc
    finally:
        await sender.close()
