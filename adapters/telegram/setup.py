"""What ``chatgate doctor`` asks Telegram, the webhook commands (``chatgate telegram
set-webhook`` and ``delete-webhook``), and the command menus (``chatgate commands sync``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from adapters.base import Check, PlatformError, Unauthorized
from adapters.telegram.commands import menus
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


def _scope(kind: str) -> Any:
    from telegram import (
        BotCommandScopeAllChatAdministrators,
        BotCommandScopeAllGroupChats,
        BotCommandScopeAllPrivateChats,
    )

    scopes: dict[str, Any] = {
        "all_private_chats": BotCommandScopeAllPrivateChats,
        "all_group_chats": BotCommandScopeAllGroupChats,
        "all_chat_administrators": BotCommandScopeAllChatAdministrators,
    }
    return scopes[kind]()


async def menu_drift(sender: TelegramSender) -> list[str]:
    """How the command menus Telegram holds differ from the registry's (``getMyCommands``
    per scope); empty when they match."""
    drift: list[str] = []
    for kind, wanted in menus().items():
        held = await sender.bot.get_my_commands(scope=_scope(kind))
        have = [(c.command, c.description) for c in held]
        if have != wanted:
            names = {name for name, _ in wanted} ^ {name for name, _ in have}
            shown = f" (only on one side: {', '.join(sorted(names))})" if names else ""
            drift.append(f"the {kind.replace('_', ' ')} menu differs{shown}")
    return drift


async def push_menus(sender: TelegramSender, *, only_drifted: bool = False) -> list[str]:
    """``setMyCommands`` for each scope (with ``only_drifted``, only where the menu Telegram
    holds differs); the scopes set."""
    from telegram import BotCommand

    pushed: list[str] = []
    for kind, wanted in menus().items():
        if only_drifted:
            held = await sender.bot.get_my_commands(scope=_scope(kind))
            if [(c.command, c.description) for c in held] == wanted:
                continue
        commands = [BotCommand(name, description) for name, description in wanted]
        await sender.bot.set_my_commands(commands, scope=_scope(kind))
        pushed.append(kind)
    return pushed


async def sync_commands(settings: Settings) -> str:
    """``chatgate commands sync``: the registry's menus, set for every scope."""
    pushed: list[str] = []

    async def call(sender: TelegramSender) -> None:
        pushed.extend(await push_menus(sender))

    await _call(settings, call)
    return f"telegram: command menus set for {', '.join(k.replace('_', ' ') for k in pushed)}"


async def command_drift(settings: Settings) -> list[str]:
    """What ``chatgate doctor`` reports: menus Telegram holds that differ from the
    registry's."""
    found: list[str] = []

    async def call(sender: TelegramSender) -> None:
        found.extend(await menu_drift(sender))

    await _call(settings, call)
    return found


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
