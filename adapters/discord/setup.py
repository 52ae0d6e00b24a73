"""What ``chatgate doctor``, ``chatgate discord invite-url`` and ``chatgate commands
sync`` ask Discord (the invite URL asks nothing: the token names the application)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from adapters.base import Check, PlatformError, Unauthorized
from adapters.discord.commands import application_id, command_payloads, drift
from adapters.discord.send import point_at
from agent_core.errors import ConfigError
from agent_core.settings import Settings

if TYPE_CHECKING:
    import discord
    import discord.http


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
    return discord.utils.oauth_url(
        application_id, permissions=permissions, scopes=("bot", "applications.commands")
    )


def token_application(token: str) -> int:
    """The application id the bot token carries (no network); ``ConfigError`` naming
    ``DISCORD_BOT_TOKEN`` when it is not shaped like a bot token."""
    found = application_id(token)
    if found is None:
        raise ConfigError(
            "DISCORD_BOT_TOKEN",
            "not a bot token (Developer Portal, your application, Bot, Reset Token); or pass "
            "--client-id",
        )
    return found


def _guilds(guilds: Sequence[str]) -> list[int | None]:
    """Where the commands go: each guild of ``DISCORD_COMMAND_GUILDS``, or everywhere."""
    if not all(g.isdigit() for g in guilds):
        raise ConfigError("DISCORD_COMMAND_GUILDS", "guild ids are numbers, comma-separated")
    return [int(g) for g in guilds] or [None]


def _where(guild: int | None) -> str:
    return f" in guild {guild}" if guild is not None else ""


async def _held(http: discord.http.HTTPClient, app: int, guild: int | None) -> list[Any]:
    if guild is None:
        return list(await http.get_global_commands(app))
    return list(await http.get_guild_commands(app, guild))


async def drift_with(
    http: discord.http.HTTPClient, app: int, *, guilds: Sequence[str]
) -> list[str]:
    """What differs between the registry and the commands Discord holds (global, or in
    each guild), one line each; empty when in sync."""
    wanted = command_payloads()
    lines: list[str] = []
    for guild in _guilds(guilds):
        lines.extend(
            f"{line}{_where(guild)}" for line in drift(wanted, await _held(http, app, guild))
        )
    return lines


async def sync_with(http: discord.http.HTTPClient, app: int, *, guilds: Sequence[str]) -> str:
    """Overwrite the application commands with the registry's where they differ (a GET
    each; a PUT only where needed); what was done, in one line."""
    wanted = command_payloads()
    changed: list[str] = []
    kept: list[str] = []
    for guild in _guilds(guilds):
        where = f"guild {guild}" if guild is not None else "global"
        if not drift(wanted, await _held(http, app, guild)):
            kept.append(where)
            continue
        if guild is None:
            await http.bulk_upsert_global_commands(app, payload=wanted)
        else:
            await http.bulk_upsert_guild_commands(app, guild, payload=wanted)
        changed.append(where)
    said = f"discord: {len(wanted)} commands"
    if changed:
        said += f" registered ({', '.join(changed)})"
        if "global" in changed:
            said += "; global commands can take up to an hour to show in clients"
    if kept:
        said += f"{'; ' if changed else ' '}already in sync ({', '.join(kept)})"
    return said


@contextlib.asynccontextmanager
async def _logged_in(settings: Settings) -> AsyncIterator[discord.Client]:
    """A REST-only client logged in with the configured token; Discord's refusals as
    ``Unauthorized`` and ``PlatformError``."""
    import discord

    assert settings.discord_bot_token is not None
    point_at(settings.discord_api_url)
    client = discord.Client(intents=discord.Intents.none())
    try:
        try:
            await client.login(settings.discord_bot_token.get_secret_value())
        except discord.LoginFailure as exc:
            raise Unauthorized("DISCORD_BOT_TOKEN: Discord does not know it") from exc
        try:
            yield client
        except discord.HTTPException as exc:
            raise PlatformError(f"discord: {exc}") from exc
    except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
        raise PlatformError(f"discord: {exc}") from exc
    finally:
        await client.close()


async def sync_commands(settings: Settings) -> str:
    """``chatgate commands sync``: register the registry's commands with Discord (global,
    or in each guild of ``DISCORD_COMMAND_GUILDS``) where they differ; one line saying
    what was done. ``Unauthorized`` for a token Discord does not know, ``PlatformError``
    when it refuses or cannot be reached, ``ConfigError`` for a bad guild id."""
    _guilds(settings.discord_command_guilds)
    async with _logged_in(settings) as client:
        assert client.application_id is not None
        return await sync_with(
            client.http, client.application_id, guilds=settings.discord_command_guilds
        )


async def command_drift(settings: Settings) -> list[str]:
    """``chatgate doctor``: what differs between the registry and Discord's commands
    (``missing /jobs``, ``differs: /cancel``, ``extra /old``; `` in guild ID`` after each
    where guilds are configured); empty when in sync. Raises as :func:`sync_commands`."""
    _guilds(settings.discord_command_guilds)
    async with _logged_in(settings) as client:
        assert client.application_id is not None
        return await drift_with(
            client.http, client.application_id, guilds=settings.discord_command_guilds
        )


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
