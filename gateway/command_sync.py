"""``chatgate commands sync`` and doctor's drift check: each platform's native commands
(Discord application commands, Telegram's command menus, Slack's slash commands) against
the command registry (``agent_core.command_registry``)."""

from __future__ import annotations

from agent_core.settings import Settings


async def sync(settings: Settings, platform: str) -> str:
    """Push the registry to ``platform``; one line saying what was done."""
    if platform == "telegram":
        from adapters.telegram.setup import sync_commands as telegram

        return await telegram(settings)
    if platform == "discord":
        from adapters.discord.setup import sync_commands as discord

        return await discord(settings)
    if platform == "slack":
        from adapters.slack.setup import sync_commands as slack

        return await slack(settings)
    return f"{platform}: nothing to sync (its commands are typed)"


async def drift(settings: Settings, platform: str) -> list[str]:
    """How ``platform``'s native commands differ from the registry (empty: they match)."""
    if platform == "telegram":
        from adapters.telegram.setup import command_drift as telegram

        return await telegram(settings)
    if platform == "discord":
        from adapters.discord.setup import command_drift as discord

        return await discord(settings)
    if platform == "slack":
        from adapters.slack.setup import command_drift as slack

        return await slack(settings)
    return []
