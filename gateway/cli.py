"""The ``chatgate`` command. Heavy imports happen inside commands so ``--help`` stays fast."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from gateway import cli_replay, cli_triggers

if TYPE_CHECKING:
    from agent_core.settings import Settings
    from agent_core.storage.store import Store

T = TypeVar("T")

app = typer.Typer(
    name="chatgate",
    help="One durable AI agent in Slack, Discord, Telegram and a built-in web chat.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _settings() -> Settings:
    """Load settings or exit 2 with one line naming the bad key."""
    from agent_core.errors import ConfigError
    from agent_core.settings_loader import load_settings

    try:
        return load_settings()
    except ConfigError as exc:
        typer.echo(f"chatgate: invalid setting {exc.key}: {exc.reason}", err=True)
        raise typer.Exit(2) from None


def _serve(*, with_workers: bool) -> None:
    settings = _settings()
    from agent_core import tracing
    from agent_core.errors import StorageError
    from gateway.app import configure_logging, serve

    configure_logging(settings)
    role = "run" if with_workers else "gateway"
    # Spans still queued when SIGTERM ends serve() are sent before the process exits.
    with tracing.exporting(os.environ, role=role):
        try:
            asyncio.run(serve(settings, with_workers=with_workers))
        except StorageError as exc:
            typer.echo(f"chatgate: database: {exc}", err=True)
            raise typer.Exit(1) from None
        except OSError as exc:
            where = f"{settings.host}:{settings.port}"
            typer.echo(f"chatgate: cannot listen on {where}: {exc}", err=True)
            raise typer.Exit(1) from None


@app.command()
def run() -> None:
    """Everything on one machine: gateway, web chat, job runner and schedule dispatcher.

    SQLite and no Redis by default; with CHATGATE_REDIS_URL also a Celery worker and beat
    as child processes."""
    _serve(with_workers=True)


@app.command()
def gateway() -> None:
    """The gateway role: webhooks, web chat, health and metrics; interactive turns inline.

    Without CHATGATE_REDIS_URL it also runs queued work itself."""
    _serve(with_workers=False)


def _needs_redis(settings: Settings, role: str) -> None:
    if not settings.redis_url:
        typer.echo(
            f"chatgate: invalid setting CHATGATE_REDIS_URL: chatgate {role} needs a Redis "
            "broker (set it, or use chatgate run, which needs none)",
            err=True,
        )
        raise typer.Exit(2)


@app.command()
def worker(
    concurrency: int = typer.Option(
        0, help="Worker processes (default: CHATGATE_JOB_CONCURRENCY)", min=0
    ),
) -> None:
    """The Celery worker role: scheduled and background turns (needs CHATGATE_REDIS_URL)."""
    settings = _settings()
    _needs_redis(settings, "worker")
    import os
    import socket

    from gateway.app import configure_logging
    from workers.celery_app import QUEUE, make_celery
    from workers.tasks import preload

    configure_logging(settings)
    celery = make_celery(settings)
    preload(settings)
    celery.worker_main(
        [
            "worker",
            f"--loglevel={settings.log_level.upper()}",
            f"--concurrency={concurrency or settings.job_concurrency}",
            "--pool=prefork",
            f"--queues={QUEUE}",
            "--without-gossip",
            "--without-mingle",
            f"--hostname=chatgate-{os.getpid()}@{socket.gethostname()}",
        ]
    )


@app.command()
def beat() -> None:
    """The Celery beat role: ticks the schedule dispatcher (needs CHATGATE_REDIS_URL).

    Safe to run twice for redundancy: each slot fires once."""
    settings = _settings()
    _needs_redis(settings, "beat")
    from gateway.app import configure_logging
    from workers import beat as beat_module
    from workers.celery_app import make_celery

    configure_logging(settings)
    beat_module.configure(settings)
    celery = make_celery(settings)
    celery.Beat(
        scheduler=beat_module.DispatchScheduler,
        loglevel=settings.log_level.upper(),
        max_interval=settings.schedule_tick_seconds,
    ).run()


@app.command()
def migrate() -> None:
    """Apply the database migrations (run and gateway also do this at start)."""
    settings = _settings()
    from agent_core.errors import StorageError
    from agent_core.storage.database import open_database

    async def go() -> str | None:
        async with open_database(settings.database_url) as database:
            current, _head = await database.revision_status()
            return current

    try:
        revision = asyncio.run(go())
    except StorageError as exc:
        typer.echo(f"chatgate: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"database at revision {revision}")


@app.command()
def doctor() -> None:
    """Check settings, the database, Redis, the platforms and the model; say how to fix."""
    settings = _settings()
    from gateway.doctor import run_checks

    results = asyncio.run(run_checks(settings))
    for result in results:
        typer.echo(result.line())
    failed = [r for r in results if r.status == "FAIL"]
    typer.echo(f"{len(results) - len(failed)} of {len(results)} checks passed")
    raise typer.Exit(1 if failed else 0)


pairing = typer.Typer(help="Manage who may talk to the agent.", no_args_is_help=True)
app.add_typer(pairing, name="pairing")


def _actor() -> str:
    import getpass

    return f"cli:{getpass.getuser()}"


def _with_store(action: Callable[[Store], Awaitable[T]]) -> T:
    settings = _settings()
    from agent_core.errors import StorageError
    from agent_core.storage.database import open_database
    from agent_core.storage.store import Store

    async def go() -> T:
        async with open_database(settings.database_url) as database:
            return await action(Store(database))

    try:
        return asyncio.run(go())
    except StorageError as exc:
        typer.echo(f"chatgate: {exc}", err=True)
        raise typer.Exit(1) from None


@pairing.command("list")
def pairing_list() -> None:
    """Pending pairing codes and the users let in."""
    pending, paired = _with_store(lambda store: store.pairing_listing())
    typer.echo("pending codes:" if pending else "no pending codes")
    for request in pending:
        typer.echo(
            f"  {request.code}  {request.user}  expires {request.expires_at:%Y-%m-%d %H:%M} UTC"
        )
    typer.echo("paired users:" if paired else "no paired users")
    for user in paired:
        typer.echo(f"  {user.user}  by {user.approved_by} at {user.approved_at:%Y-%m-%d %H:%M} UTC")


@pairing.command("approve")
def pairing_approve(code: str) -> None:
    """Let the stranger who got CODE talk to the agent."""
    from agent_core.errors import PairingRefused

    try:
        request = _with_store(lambda store: store.approve_pairing(code, actor=_actor()))
    except PairingRefused as exc:
        typer.echo(f"chatgate: code {exc.code} is {exc.reason}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{request.user} may now talk to the agent")


@pairing.command("revoke")
def pairing_revoke(user: str) -> None:
    """Shut USER (platform:user_id) out again."""
    if not _with_store(lambda store: store.revoke_user(user, actor=_actor())):
        typer.echo(f"chatgate: {user} is not paired", err=True)
        raise typer.Exit(1)
    typer.echo(
        f"{user} may no longer talk to the agent; a running gateway cancels their pending "
        "approvals and pauses their schedules within seconds, and none of their queued work "
        "calls the model"
    )


@app.command()
def forget(
    user: str = typer.Argument(..., help="the person, as platform:user_id (slack:U123)"),
    export: str | None = typer.Option(
        None, help="where the export goes first (default chatgate-export-USER-DATE.json)"
    ),
    yes: bool = typer.Option(False, "--yes", help="do not ask before erasing"),
) -> None:
    """Export everything chatgate holds about USER to a file, then erase it: messages become
    a tombstone, memories and schedules go, the journal keeps counts and costs only. The
    audit log keeps a receipt."""
    import json
    from datetime import UTC, datetime
    from pathlib import Path

    settings = _settings()
    from agent_core.errors import StorageError
    from agent_core.files.bucket import store_for
    from agent_core.files.erasure import remove_files
    from agent_core.storage.database import open_database
    from agent_core.storage.operations import Operations

    safe = "".join(c if c.isalnum() else "-" for c in user)
    target = Path(export or f"chatgate-export-{safe}-{datetime.now(UTC):%Y%m%d-%H%M%S}.json")

    async def exported() -> dict[str, Any]:
        async with open_database(settings.database_url) as database:
            return await Operations(database).export_person(user)

    async def erased() -> dict[str, Any]:
        async with open_database(settings.database_url) as database:
            receipt, left = await Operations(database).forget_person(user, actor=_actor())
        await remove_files(
            blobs=[str(v) for v in left["blobs"]],  # type: ignore[union-attr]
            uploads=[str(v) for v in left["uploads"]],  # type: ignore[union-attr]
            conversations=[str(v) for v in left["conversations"]],  # type: ignore[union-attr]
            store=store_for(settings),
            state_dir=settings.state_dir.resolve(),
        )
        return receipt

    try:
        document = asyncio.run(exported())
        # Private from its first byte: it holds everything about a person.
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(json.dumps(document, ensure_ascii=False, indent=2))
        counts = {k: len(v) for k, v in document.items() if isinstance(v, list)}
        typer.echo(
            f"exported {counts['messages']} messages, {counts['memories']} memories and "
            f"{counts['schedules']} schedules to {target}"
        )
        if not yes and not typer.confirm(f"Erase {user}'s data now? This cannot be undone"):
            raise typer.Exit(1)
        receipt = asyncio.run(erased())
    except StorageError as exc:
        typer.echo(f"chatgate: {exc}", err=True)
        raise typer.Exit(1) from None
    except FileExistsError:
        typer.echo(f"chatgate: {target} exists; name another file with --export", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"erased: {json.dumps(receipt)}")


telegram = typer.Typer(help="Register or remove the Telegram webhook.", no_args_is_help=True)
app.add_typer(telegram, name="telegram")


def _telegram_settings(settings: Settings, *, needs_secret: bool) -> Settings:
    """``settings`` when they name a bot (and a webhook secret, if ``needs_secret``);
    exit 2 naming the missing setting otherwise."""
    if settings.telegram_bot_token is None:
        typer.echo("chatgate: invalid setting TELEGRAM_BOT_TOKEN: not set", err=True)
        raise typer.Exit(2)
    if needs_secret and settings.telegram_webhook_secret is None:
        typer.echo(
            "chatgate: invalid setting TELEGRAM_WEBHOOK_SECRET: the webhook needs it (Telegram "
            "sends it with every update and the gateway refuses updates without it)",
            err=True,
        )
        raise typer.Exit(2)
    return settings


def _platform_call(action: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a setup call; the platform's refusal is exit 1."""
    from adapters.base import AdapterError

    try:
        return asyncio.run(action())
    except AdapterError as exc:
        typer.echo(f"chatgate: {exc}", err=True)
        raise typer.Exit(1) from None


@telegram.command("set-webhook")
def telegram_set_webhook(
    url: str = typer.Argument(help="https://your.host/telegram/webhook"),
    drop_pending_updates: bool = typer.Option(
        False, help="Discard the updates Telegram holds for the bot"
    ),
) -> None:
    """Point Telegram at URL, with TELEGRAM_WEBHOOK_SECRET and the updates chatgate reads."""
    settings = _settings()
    if not url.startswith("https://"):
        typer.echo("chatgate: Telegram only delivers to https:// URLs", err=True)
        raise typer.Exit(2)
    settings = _telegram_settings(settings, needs_secret=True)
    from adapters.telegram.parse import ALLOWED_UPDATES
    from adapters.telegram.setup import set_webhook

    _platform_call(lambda: set_webhook(settings, url, drop_pending=drop_pending_updates))
    typer.echo(f"webhook set: {url} (updates: {', '.join(ALLOWED_UPDATES)})")


@telegram.command("delete-webhook")
def telegram_delete_webhook(
    drop_pending_updates: bool = typer.Option(
        False, help="Discard the updates Telegram holds for the bot"
    ),
) -> None:
    """Remove the webhook (the gateway then long-polls when TELEGRAM_WEBHOOK_SECRET is unset)."""
    settings = _telegram_settings(_settings(), needs_secret=False)
    from adapters.telegram.setup import delete_webhook

    _platform_call(lambda: delete_webhook(settings, drop_pending=drop_pending_updates))
    typer.echo("webhook deleted")


commands_app = typer.Typer(
    help="The chat commands each platform offers natively.", no_args_is_help=True
)
app.add_typer(commands_app, name="commands")


@commands_app.command("sync")
def commands_sync() -> None:
    """Push the command registry to every configured platform: Discord's application
    commands, Telegram's command menus (Slack's are in its manifest: it says how)."""
    settings = _settings()
    from adapters.base import AdapterError, Unauthorized
    from adapters.registry import configured_platforms
    from gateway.command_sync import sync

    failed = False
    for platform in configured_platforms(settings):
        try:
            typer.echo(asyncio.run(sync(settings, platform)))
        except Unauthorized as exc:
            typer.echo(f"chatgate: invalid setting {exc}", err=True)
            raise typer.Exit(2) from None
        except AdapterError as exc:
            typer.echo(f"chatgate: {platform}: {exc}", err=True)
            failed = True
    raise typer.Exit(1 if failed else 0)


slack_app = typer.Typer(help="Set up Slack.", no_args_is_help=True)
app.add_typer(slack_app, name="slack")


@slack_app.command("manifest")
def slack_manifest(
    url: str | None = typer.Option(
        None, help="where Slack sends events: https://your.host/slack/events"
    ),
    socket_mode: bool = typer.Option(False, "--socket-mode", help="Socket Mode instead"),
) -> None:
    """Print the Slack app manifest, generated from the command registry (paste it in the
    app's App Manifest page, then reinstall the app)."""
    if url is not None and not url.startswith("https://"):
        typer.echo("chatgate: Slack only delivers to https:// URLs", err=True)
        raise typer.Exit(2)
    from adapters.slack.manifest import manifest_text

    typer.echo(manifest_text(url, socket_mode=socket_mode), nl=False)


discord_app = typer.Typer(help="Set up Discord.", no_args_is_help=True)
app.add_typer(discord_app, name="discord")


@discord_app.command("invite-url")
def discord_invite_url(
    client_id: int | None = typer.Option(
        None, "--client-id", help="the application id (default: read from the bot token)"
    ),
) -> None:
    """Print the URL that adds the bot to a server, with the permissions chatgate uses and
    its application commands. Asks Discord nothing: the bot token names the application."""
    from adapters.discord.setup import invite_url, token_application
    from agent_core.errors import ConfigError

    if client_id is None:
        settings = _settings()
        if settings.discord_bot_token is None:
            typer.echo("chatgate: invalid setting DISCORD_BOT_TOKEN: not set", err=True)
            raise typer.Exit(2)
        try:
            client_id = token_application(settings.discord_bot_token.get_secret_value())
        except ConfigError as exc:
            typer.echo(f"chatgate: invalid setting {exc.key}: {exc.reason}", err=True)
            raise typer.Exit(2) from None
    typer.echo(invite_url(client_id))


cli_replay.register(app, _settings)
cli_triggers.register(app, _settings)


def main() -> None:
    """Console-script entry point: every command runs hardened (private files, not
    dumpable), the roles ``run`` starts as children included."""
    from agent_core.hardening import harden_process

    harden_process()
    app(prog_name="chatgate")


if __name__ == "__main__":
    main()
