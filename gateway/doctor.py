"""``chatgate doctor``: each check says what is wrong and how to fix it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from typing import Any

from adapters.base import AdapterError, Check
from adapters.registry import build_adapters
from agent_core.errors import ModelError, StorageError
from agent_core.files.bucket import BucketBlobs, store_for
from agent_core.model import ChatMessage
from agent_core.sandbox.choose import choose_sandbox
from agent_core.settings import Settings
from agent_core.storage.database import Database, sqlite_path
from gateway.doctor_schedules import schedule_lag
from workers.bootstrap import sandbox_config
from workers.models import build_model


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
    finally:
        await model.aclose()
    return Check("model", "ok", f"{settings.model} answered (as {reply.model})")


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


async def _hearing(settings: Settings) -> list[Check]:
    """What the gateway running here (``CHATGATE_HOST``:``CHATGATE_PORT``) hears from
    each platform: deaf since when and why, or when its last event came."""
    import aiohttp

    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    url = f"http://{host}:{settings.port}/readyz"
    token = settings.metrics_token
    headers = {"Authorization": f"Bearer {token.get_secret_value()}"} if token else {}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3)) as session,
            session.get(url, headers=headers) as response,
        ):
            body = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return [Check("hearing", "ok", f"no gateway answers at {url}: nothing to ask")]
    checks = []
    platforms = body.get("platforms") if isinstance(body, dict) else None
    for platform, hearing in sorted((platforms or {}).items()):
        if hearing.get("deaf_since"):
            checks.append(
                Check(
                    f"{platform} inbound",
                    "WARN",
                    f"deaf since {hearing['deaf_since']}: {hearing.get('reason')}",
                    "see the gateway log ('platform deaf') and the platform's own status",
                )
            )
        else:
            last = hearing.get("last_event_at") or "none since the gateway started"
            checks.append(Check(f"{platform} inbound", "ok", f"hearing; last event {last}"))
    return checks


async def _file_store(settings: Settings) -> Check:
    store = store_for(settings)
    if not isinstance(store, BucketBlobs):
        return Check("file store", "ok", f"{settings.state_dir.resolve() / 'files'}")
    try:
        where = await store.check()
    except Exception as exc:
        return Check(
            "file store",
            "FAIL",
            f"the bucket does not answer: {type(exc).__name__}: {str(exc)[:200]}",
            "check CHATGATE_FILES_S3_BUCKET, _ENDPOINT, _REGION and the AWS_* credentials",
        )
    finally:
        store.close()
    return Check("file store", "ok", f"{where} answers")


async def _command_drift(settings: Settings, platform: str) -> Check:
    """Whether the platform's native commands are the registry's (``chatgate commands
    sync`` sets them)."""
    from gateway.command_sync import drift

    name = f"{platform} commands"
    if platform == "slack":
        # A bot token cannot read an app's slash commands: nothing to compare with.
        return Check(
            name,
            "ok",
            "the app manifest holds them (a bot token cannot read them back): `chatgate "
            "slack manifest` prints the registry's, to paste after an upgrade",
        )
    try:
        found = await drift(settings, platform)
    except AdapterError as exc:
        return Check(name, "WARN", f"could not compare: {exc}", "run chatgate doctor again")
    if not found:
        return Check(name, "ok", "as the registry has them")
    return Check(name, "WARN", "; ".join(found), "chatgate commands sync")


async def run_checks(settings: Settings) -> list[Check]:
    """Every check, in the order they are printed."""
    checks = [
        Check("settings", "ok", "loaded" + (f" from {settings.config}" if settings.config else ""))
    ]
    checks.append(await _database(settings))
    checks.append(await _redis(settings))
    adapters = build_adapters(settings)
    web = adapters.pop("web")
    checks.append(await web.check())
    checks.append(_tools(settings))
    checks.append(await _sandbox(settings))
    checks.append(_private_files(settings))
    checks.append(await _file_store(settings))
    if (faults := _faults(settings)) is not None:
        checks.append(faults)
    checks.append(_secrets(settings, os.environ))
    for adapter in adapters.values():
        async with adapter:
            checks.append(await adapter.check())
    for platform in adapters:
        checks.append(await _command_drift(settings, platform))
    checks.append(await _model(settings))
    checks.append(await schedule_lag(settings))
    checks += await _hearing(settings)
    return checks
