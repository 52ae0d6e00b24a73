"""Which adapters this process has: the one place that maps settings to platforms.

Each platform's package (and its SDK) is imported only when its token is set. A fourth
platform is a package under ``adapters/`` and one entry here."""

from __future__ import annotations

from typing import Protocol

from adapters.base import ChatAdapter, GatewayHooks
from adapters.web.inbound import WebAdapter
from adapters.web.send import WebHub
from agent_core.events import Platform
from agent_core.settings import Settings

# What the gateway answers on a platform's webhook route while that platform is not
# configured (404, with what would configure it).
UNCONFIGURED_ROUTES = {
    "/slack/events": "Slack over HTTP is not configured (SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET)",
    "/telegram/webhook": (
        "the Telegram webhook is not configured (TELEGRAM_BOT_TOKEN, TELEGRAM_WEBHOOK_SECRET)"
    ),
}


class AdapterFactory(Protocol):
    """What builds a process's adapters: :func:`build_adapters`, or a test's stand-in."""

    def __call__(
        self, settings: Settings, *, hooks: GatewayHooks | None = ..., hub: WebHub | None = ...
    ) -> dict[Platform, ChatAdapter]:
        """The adapters for these settings."""
        ...


def configured_platforms(settings: Settings) -> list[Platform]:
    """The chat platforms the settings connect (the web chat is always there)."""
    found: list[Platform] = []
    if settings.slack_bot_token is not None:
        found.append("slack")
    if settings.telegram_bot_token is not None:
        found.append("telegram")
    if settings.discord_bot_token is not None:
        found.append("discord")
    return found


def build_adapters(
    settings: Settings, *, hooks: GatewayHooks | None = None, hub: WebHub | None = None
) -> dict[Platform, ChatAdapter]:
    """The web chat's adapter and each configured platform's. ``hooks``: the gateway's,
    for adapters that receive (workers pass none: they only send); ``hub``: the web
    streams this process serves."""
    adapters: dict[Platform, ChatAdapter] = {"web": WebAdapter(settings, hub)}
    if settings.slack_bot_token is not None:
        from adapters.slack.inbound import SlackAdapter

        adapters["slack"] = SlackAdapter(settings, hooks)
    if settings.telegram_bot_token is not None:
        from adapters.telegram.inbound import TelegramAdapter

        adapters["telegram"] = TelegramAdapter(settings, hooks)
    if settings.discord_bot_token is not None:
        from adapters.discord.inbound import DiscordAdapter

        adapters["discord"] = DiscordAdapter(settings, hooks)
    return adapters
