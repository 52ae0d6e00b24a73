"""``chatgate doctor``: each check says what is wrong and how to fix it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from adapters.web import is_loopback
from agent_core.errors import ModelError, StorageError
from agent_core.model import ChatMessage
from agent_core.sandbox.choose import choose_sandbox
from agent_core.settings import Settings
from agent_core.storage.database import Database, sqlite_path
from workers.runtime import build_model, sandbox_config

Status = Literal["ok", "WARN", "FAIL"]


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def line(self) -> str:
        """The check as printed: status, name, detail and the fix if any."""
        text = f"{self.status:<4} {self.name:<10} {self.detail}"
        return f"{text}\n     fix: {self.fix}" if self.fix else text


async def _database(settings: Settings) -> Check:
    database = Database(settings.database_url)
    shown = database.display_url()
    try:
        async with asyncio.timeout(10):
            await database.ping()
            current, head = await database.revision_status()
    except (StorageError, TimeoutError, OSError) as exc:
        return Check(
            "database",
            "FAIL",
            f"{shown}: {exc or 'timed out'}",
            "check CHATGATE_DATABASE_URL and that the server is running",
        )
    finally:
        await database.dispose()
    if current != head:
        return Check(
            "database",
            "WARN",
            f"{shown} at revision {current}, code at {head}",
            "run `chatgate migrate` (run and gateway also migrate at start)",
        )
    return Check("database", "ok", f"{shown} at revision {current}")


async def _redis(settings: Settings) -> Check:
    if not settings.redis_url:
        return Check("redis", "ok", "not configured: embedded profile (no Redis needed)")
    import redis.asyncio as aioredis

    client = aioredis.from_url(settings.redis_url, socket_connect_timeout=3)
    policy: str | None = None
    try:
        async with asyncio.timeout(5):
            await client.ping()
            with contextlib.suppress(aioredis.RedisError):  # CONFIG may be disabled
                found: dict[Any, Any] = await client.config_get("maxmemory-policy")
                for value in found.values():
                    policy = (value.decode() if isinstance(value, bytes) else str(value)) or None
    except (OSError, TimeoutError, aioredis.RedisError) as exc:
        return Check(
            "redis",
            "FAIL",
            f"{settings.redis_url}: {exc or 'timed out'}",
            "check CHATGATE_REDIS_URL and that Redis is running",
        )
    finally:
        await client.aclose()
    if policy not in (None, "noeviction"):
        return Check(
            "redis",
            "WARN",
            f"answers PING; maxmemory-policy is {policy}: under memory pressure Redis may "
            "evict queued jobs and Celery's bindings",
            "set `maxmemory-policy noeviction` in redis.conf (CONFIG SET works until restart)",
        )
    return Check("redis", "ok", "answers PING" + (f", maxmemory-policy {policy}" if policy else ""))


async def _model(settings: Settings) -> Check:
    model = build_model(settings)
    if model is None:
        return Check(
            "model",
            "WARN",
            "CHATGATE_MODEL is not set: chat replies say so",
            "set CHATGATE_MODEL (e.g. openai/gpt-4o-mini) and, for an "
            "OpenAI-compatible server, CHATGATE_MODEL_API_BASE",
        )
    try:
        async with asyncio.timeout(settings.model_timeout + 5):
            reply = await model.complete([ChatMessage(role="user", content="ping")], max_tokens=1)
    except (ModelError, TimeoutError) as exc:
        return Check(
            "model",
            "FAIL",
            f"{settings.model}: {exc or 'timed out'}",
            "check CHATGATE_MODEL, CHATGATE_MODEL_API_BASE and CHATGATE_MODEL_API_KEY",
        )
    return Check("model", "ok", f"{settings.model} answered (as {reply.model})")


def _web(settings: Settings) -> Check:
    if settings.web_token is not None:
        return Check("web", "ok", "web chat needs the token (CHATGATE_WEB_TOKEN)")
    if is_loopback(settings.host) or settings.host == "localhost":
        return Check("web", "ok", f"web chat on http://{settings.host}:{settings.port}/")
    return Check(
        "web",
        "WARN",
        f"listening on {settings.host} without CHATGATE_WEB_TOKEN: the web chat "
        "refuses every client that is not on loopback",
        "set CHATGATE_WEB_TOKEN to use the web chat from other machines",
    )


def _secrets(settings: Settings, environ: Mapping[str, str]) -> Check:
    missing = [
        f"{name} ({setting.env})"
        for name, setting in settings.secrets.items()
        if not environ.get(setting.env)
    ]
    if missing:
        return Check(
            "secrets",
            "FAIL",
            f"not set in the environment: {', '.join(missing)}",
            "export each variable named in [secrets] before starting chatgate",
        )
    unbound = sorted(name for name, setting in settings.secrets.items() if setting.hosts is None)
    if unbound:
        return Check(
            "secrets",
            "WARN",
            f"not bound to hosts, so they may go to any allowed host: {', '.join(unbound)}",
            f'write [secrets.{unbound[0]}] env = "..." and hosts = ["the.api.host"]',
        )
    names = ", ".join(sorted(settings.secrets)) or "none configured"
    return Check("secrets", "ok", names)


def _tools(settings: Settings) -> Check:
    hosts = settings.tools.http_request.allowed_hosts
    run = settings.tools.run_command
    detail = (
        f"run_command limits: {run.timeout:g}s, {run.cpu_seconds}s CPU, {run.memory_mb} MiB, "
        f"{run.processes} processes; http_request hosts: {', '.join(hosts) or 'none'}; "
        f"{len(settings.policy)} policy rule(s)"
    )
    return Check("tools", "ok", detail)


async def _sandbox(settings: Settings) -> Check:
    """What run_command runs in, found the way the gateway finds it at start."""
    choice = await choose_sandbox(sandbox_config(settings))
    sandbox = choice.sandbox
    if sandbox is None:
        return Check(
            "sandbox",
            "WARN" if settings.sandbox == "auto" else "FAIL",
            f"no working boundary (CHATGATE_SANDBOX={settings.sandbox}), so run_command is "
            f"not offered: {choice.reasons()}",
            choice.fix(),
        )
    if sandbox.name == "none":
        return Check(
            "sandbox",
            "WARN",
            "CHATGATE_SANDBOX=none: run_command runs as a plain process, with chatgate's files, "
            "its API on loopback and the network in reach",
            "install bubblewrap and set CHATGATE_SANDBOX=auto",
        )
    who = "nobody" if os.getuid() == 0 else f"uid {os.getuid()}"
    where = f"{sandbox.name} as {who}"
    if sandbox.network == "full":
        return Check(
            "sandbox",
            "WARN",
            f"{where}; commands may reach the network ([tools.run_command] network = "
            '"full"), chatgate\'s own API on this host included',
            'set network = "none" unless commands need the network',
        )
    return Check("sandbox", "ok", f"{where}; no network")


def _private_files(settings: Settings) -> Check:
    """chatgate.toml and the SQLite database hold tokens and every conversation."""
    paths = [p for p in (settings.config, sqlite_path(settings.database_url)) if p is not None]
    readable = []
    for path in paths:
        with contextlib.suppress(OSError):
            if path.stat().st_mode & 0o044:
                readable.append(str(path))
    if readable:
        return Check(
            "files",
            "WARN",
            f"others may read {', '.join(readable)}",
            f"chmod 600 {' '.join(readable)}",
        )
    return Check("files", "ok", f"{len(paths)} file(s) readable by chatgate's user only")


def _faults(settings: Settings) -> Check | None:
    if not settings.test_fault:
        return None
    return Check(
        "faults",
        "WARN",
        f"CHATGATE_TEST_FAULT is set ({', '.join(settings.test_fault)}): chatgate kills "
        "itself at these steps",
        "unset CHATGATE_TEST_FAULT (it is for crash tests only)",
    )


# What deploy/slack/manifest.yml asks for; without them some messages never arrive.
SLACK_SCOPES = (
    "app_mentions:read",
    "chat:write",
    "commands",
    "im:history",
    "channels:history",
    "groups:history",
    "files:read",
)


async def _slack(settings: Settings) -> Check | None:
    if settings.slack_bot_token is None:
        return None
    if settings.slack_signing_secret is None and settings.slack_app_token is None:
        return Check(
            "slack",
            "FAIL",
            "SLACK_BOT_TOKEN is set but neither SLACK_SIGNING_SECRET (Events API) nor "
            "SLACK_APP_TOKEN (Socket Mode)",
            "copy the signing secret from the app's Basic Information page",
        )
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(), base_url=settings.slack_api_url
    )
    try:
        async with asyncio.timeout(10):
            response = await client.auth_test()
    except SlackApiError as exc:
        return Check(
            "slack",
            "FAIL",
            f"auth.test: {exc.response.get('error', exc)}",
            "check SLACK_BOT_TOKEN (the xoxb- Bot User OAuth Token) and reinstall the app",
        )
    except (OSError, TimeoutError) as exc:
        return Check(
            "slack",
            "FAIL",
            f"{settings.slack_api_url}: {exc or 'timed out'}",
            "check SLACK_API_URL and the network",
        )
    granted = {s.strip() for s in str(response.headers.get("x-oauth-scopes", "")).split(",")}
    missing = [scope for scope in SLACK_SCOPES if scope not in granted]
    who = f"as {response.get('user_id')} in {response.get('team') or response.get('team_id')}"
    if missing and granted != {""}:
        return Check(
            "slack",
            "WARN",
            f"auth.test ok {who}; missing scopes: {', '.join(missing)}",
            "add them (deploy/slack/manifest.yml lists them all) and reinstall the app",
        )
    mode = "Socket Mode" if settings.slack_app_token else "Events API at /slack/events"
    return Check("slack", "ok", f"auth.test ok {who}; {mode}")


async def _telegram(settings: Settings) -> Check | None:
    """``getMe`` (the token), then ``getWebhookInfo`` against the mode the settings ask for."""
    if settings.telegram_bot_token is None:
        return None
    from telegram.error import InvalidToken, TelegramError

    from adapters.telegram import ALLOWED_UPDATES, TelegramSender

    sender = TelegramSender(
        settings.telegram_bot_token.get_secret_value(), base_url=settings.telegram_api_url
    )
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
    finally:
        await sender.close()
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


async def _discord(settings: Settings) -> Check | None:
    """The token (REST login) and the Message Content intent (the application's flags)."""
    if settings.discord_bot_token is None:
        return None
    import discord

    from adapters.discord import application

    try:
        async with asyncio.timeout(10):
            app = await application(
                settings.discord_bot_token.get_secret_value(), api_url=settings.discord_api_url
            )
    except discord.LoginFailure:
        return Check(
            "discord",
            "FAIL",
            "login: Discord does not know this token",
            "copy the bot token (Developer Portal, your application, Bot, Reset Token) into "
            "DISCORD_BOT_TOKEN",
        )
    except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
        return Check(
            "discord",
            "FAIL",
            f"{settings.discord_api_url}: {exc or 'timed out'}",
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


async def run_checks(settings: Settings) -> list[Check]:
    """Every check, in the order they are printed."""
    checks = [
        Check("settings", "ok", "loaded" + (f" from {settings.config}" if settings.config else ""))
    ]
    checks.append(await _database(settings))
    checks.append(await _redis(settings))
    checks.append(_web(settings))
    checks.append(_tools(settings))
    checks.append(await _sandbox(settings))
    checks.append(_private_files(settings))
    if (faults := _faults(settings)) is not None:
        checks.append(faults)
    checks.append(_secrets(settings, os.environ))
    for platform in (await _slack(settings), await _telegram(settings), await _discord(settings)):
        if platform is not None:
            checks.append(platform)
    checks.append(await _model(settings))
    return checks
