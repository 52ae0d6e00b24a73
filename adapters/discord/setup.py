"""What ``chatgate doctor`` and ``chatgate discord invite-url`` ask Discord."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from adapters.base import Check, PlatformError, Unauthorized
from adapters.discord.send import point_at
from agent_core.settings import Settings


@dataclass(frozen=True, slots=True)
class Application:
    """What ``chatgate doctor`` and ``chatgate discord invite-url`` need to know."""

    id: int
    bot: str
    message_content: bool  # the privileged intent is switched on
    interactions_url: str | None  # set: button presses go there, not over the gateway


async def application(token: str, *, api_url: str) -> Application:
    """Log in over REST and read the application (``discord.LoginFailure`` for a bad
    token)."""
    import discord

    point_at(api_url)
    client = discord.Client(intents=discord.Intents.none())
    try:
        await client.login(token)
        info = await client.application_info()
        flags = info.flags
        return Application(
            id=info.id,
            bot=str(client.user),
            message_content=flags.gateway_message_content or flags.gateway_message_content_limited,
            interactions_url=info.interactions_endpoint_url,
        )
    finally:
        await client.close()


def invite_url(application_id: int) -> str:
    """The URL that adds the bot to a server with the permissions chatgate uses."""
    import discord

    permissions = discord.Permissions(
        view_channel=True,
        send_messages=True,
        send_messages_in_threads=True,
        read_message_history=True,
        embed_links=True,
        attach_files=True,
    )
    return discord.utils.oauth_url(application_id, permissions=permissions, scopes=("bot",))


async def find_application(settings: Settings) -> Application:
    """:func:`application` with the configured token; ``Unauthorized`` for a token Discord
    does not know, ``PlatformError`` when it cannot be asked."""
    import discord

    assert settings.discord_bot_token is not None
    try:
        return await application(
            settings.discord_bot_token.get_secret_value(), api_url=settings.discord_api_url
        )
    except discord.LoginFailure as exc:
        raise Unauthorized("DISCORD_BOT_TOKEN: Discord does not know it") from exc
    except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
        raise PlatformError(f"discord: {exc}") from exc


async def check(settings: Settings) -> Check:
    """The token (REST login) and the Message Content intent (the application's flags)."""
    try:
        async with asyncio.timeout(10):
            app = await find_application(settings)
    except Unauthorized:
        return Check(
            "discord",
            "FAIL",
            "login: Discord does not know this token",
            "copy the bot token (Developer Portal, your application, Bot, Reset Token) into "
            "DISCORD_BOT_TOKEN",
        )
    except (PlatformError, TimeoutError) as exc:
        return Check(
            "discord",
            "FAIL",
            f"{settings.discord_api_url}: {str(exc).removeprefix('discord: ') or 'timed out'}",
            "check DISCORD_API_URL and the network",
        )
    if not app.message_content:
        return Check(
            "discord",
            "FAIL",
            f"logged in as {app.bot}, but the Message Content intent is off: messages would "
            "arrive empty",
            "Developer Portal, your application, Bot, Privileged Gateway Intents: switch on "
            "Message Content Intent",
        )
    if app.interactions_url:
        return Check(
            "discord",
            "WARN",
            f"logged in as {app.bot}; an Interactions Endpoint URL is set ({app.interactions_url})"
            ", so button presses go there instead of to chatgate",
            "clear it (Developer Portal, General Information, Interactions Endpoint URL)",
        )
    return Check("discord", "ok", f"logged in as {app.bot}; Message Content intent on")
