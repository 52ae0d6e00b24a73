"""``chatgate trigger``: create, list, fire, pause, resume and delete triggers.

``fire`` writes the fire to the database like ``POST /api/triggers/{id}`` does (same
checks, same receipt) and, with a broker configured, hands its job to Celery at once;
without one, the gateway's embedded runner finds the job in the table within a tick.
"""

from __future__ import annotations

import asyncio
import getpass
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

import typer

if TYPE_CHECKING:
    from agent_core.settings import Settings
    from agent_core.storage.store import Store
    from agent_core.triggers import Triggers

T = TypeVar("T")

trigger_app = typer.Typer(
    help="Triggers: an HTTP request (or `chatgate trigger fire`) wakes the agent in a chat.",
    no_args_is_help=True,
)
_settings_loader: Callable[[], Settings] | None = None


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"chatgate: {message}", err=True)
    return typer.Exit(code)


def _run(action: Callable[[Store, Triggers, Settings], Awaitable[T]]) -> T:
    """Run ``action`` with the store and the trigger service (Celery's queue when a broker
    is configured, else none: the embedded runner polls the table)."""
    assert _settings_loader is not None
    settings = _settings_loader()
    from agent_core.access import with_operator
    from agent_core.errors import StorageError
    from agent_core.storage.database import open_database
    from agent_core.storage.store import Store
    from agent_core.triggers import Triggers

    async def go() -> T:
        async with open_database(settings.database_url) as database:
            store = Store(database)
            submit, close = _queue(settings, store)
            try:
                triggers = Triggers(
                    store,
                    submit,
                    max_bytes=settings.trigger_max_bytes,
                    per_hour=settings.trigger_per_hour,
                    admins=with_operator(settings.admins),
                )
                return await action(store, triggers, settings)
            finally:
                close()

    try:
        return asyncio.run(go())
    except StorageError as exc:
        raise _fail(f"database: {exc}", 1) from None


def _queue(
    settings: Settings, store: Store
) -> tuple[Callable[[Sequence[int]], Awaitable[None]], Callable[[], None]]:
    if not settings.redis_url:

        async def nothing(job_ids: Sequence[int]) -> None:
            return None  # the embedded runner claims due jobs from the table itself

        return nothing, lambda: None
    from workers.celery_app import CeleryJobQueue, make_celery

    queue = CeleryJobQueue(make_celery(settings), store)

    async def submit(job_ids: Sequence[int]) -> None:
        try:
            await queue.submit(job_ids)
        except Exception as exc:  # the dispatcher sends unsent jobs again
            typer.echo(
                f"chatgate: broker unavailable ({exc}); the dispatcher will send it", err=True
            )

    return submit, queue.close


async def _conversation(store: Store, name: str) -> str:
    """A conversation id, or ``platform:channel`` of a chat the agent is in."""
    if await store.conversation(name) is not None:
        return name
    platform, sep, channel = name.partition(":")
    found = await store.find_conversation(platform, channel) if sep else None
    if found is None:
        raise _fail(
            f"no conversation {name!r}: give its id (the console lists them) or platform:channel "
            "of a chat the agent has talked in (slack:C0123, web:main)"
        )
    return found


@trigger_app.command("create")
def create(
    conversation: str = typer.Option(
        ..., "--conversation", help="where its turns run: a conversation id or platform:channel"
    ),
    prompt: str = typer.Option(..., "--prompt", help="what the agent does when it fires"),
    per_hour: int | None = typer.Option(
        None, "--per-hour", help="fires accepted in any hour (default CHATGATE_TRIGGER_PER_HOUR)"
    ),
) -> None:
    """Create a trigger; prints its id, its secret (shown this once) and how to fire it."""
    from agent_core.triggers import BadFire

    async def go(store: Store, triggers: Triggers, settings: Settings) -> tuple[str, str, str]:
        conversation_id = await _conversation(store, conversation)
        try:
            made, secret = await triggers.create(
                conversation_id,
                prompt=prompt,
                created_by=f"cli:{getpass.getuser()}",
                per_hour=per_hour,
            )
        except BadFire as exc:
            raise _fail(str(exc)) from None
        return made.id, secret, f"http://{settings.host}:{settings.port}/api/triggers/{made.id}"

    trigger_id, secret, url = _run(go)
    typer.echo(f"trigger {trigger_id}\nsecret  {secret}\nurl     {url}")
    typer.echo(
        "The secret is shown this once. Fire it with:\n"
        f'  curl -X POST -H "Authorization: Bearer $SECRET" -H "Idempotency-Key: $RUN_ID" '
        f"--data-binary @report.txt {url}\n"
        f"  chatgate trigger fire {trigger_id} --data report.txt"
    )


@trigger_app.command("list")
def list_triggers() -> None:
    """Every trigger that is not deleted: id, conversation, status, limit, prompt, last fire."""
    from agent_core.triggers import describe, fire_line

    async def go(store: Store, triggers: Triggers, settings: Settings) -> list[str]:
        lines = []
        for trigger in await triggers.listing(fires=1):
            where = f"{trigger.conversation.platform}:{trigger.conversation.channel}"
            lines.append(f"{describe(trigger)} -> {where} ({trigger.conversation_id})")
            lines.extend(f"    last {fire_line(fire)}" for fire in trigger.fires)
        return lines

    lines = _run(go)
    typer.echo("\n".join(lines) if lines else "No triggers.")


@trigger_app.command("fire")
def fire(
    trigger_id: str = typer.Argument(..., help="the trigger's id (tr_...)"),
    data: Annotated[
        Path | None,
        typer.Option("--data", help="a file whose text the turn looks at ('-': standard input)"),
    ] = None,
    key: str | None = typer.Option(
        None, "--key", help="an idempotency key: firing again with it queues nothing new"
    ),
) -> None:
    """Fire a trigger from a shell or a CI step, as ``POST /api/triggers/{id}`` does."""
    from agent_core.errors import TriggerError
    from agent_core.triggers import fire_outcome

    if data is None:
        body = b""
    elif str(data) == "-":
        body = sys.stdin.buffer.read()
    else:
        try:
            body = data.read_bytes()
        except OSError as exc:
            raise _fail(f"cannot read {data}: {exc.strerror}") from None

    async def go(store: Store, triggers: Triggers, settings: Settings) -> str:
        try:
            fired = await triggers.fire(trigger_id, body, key=key, source="cli")
        except TriggerError as exc:
            raise _fail(str(exc), 1) from None
        again = " (the same fire as before: nothing new queued)" if fired.duplicate else ""
        return f"fire {fired.fire.id}: job {fired.fire.job_id}, {fire_outcome(fired.fire)}{again}"

    typer.echo(_run(go))


def _change(trigger_id: str, action: Literal["pause", "resume", "delete"]) -> None:
    from agent_core.errors import TriggerError

    async def go(store: Store, triggers: Triggers, settings: Settings) -> str:
        try:
            changed = await triggers.change(trigger_id, action, actor=f"cli:{getpass.getuser()}")
        except TriggerError as exc:
            raise _fail(str(exc), 1) from None
        return f"trigger {changed.id}: {changed.status}"

    typer.echo(_run(go))


@trigger_app.command("pause")
def pause(trigger_id: str = typer.Argument(..., help="the trigger's id")) -> None:
    """Refuse its fires (409) until it is resumed."""
    _change(trigger_id, "pause")


@trigger_app.command("resume")
def resume(trigger_id: str = typer.Argument(..., help="the trigger's id")) -> None:
    """Accept its fires again."""
    _change(trigger_id, "resume")


@trigger_app.command("delete")
def delete(trigger_id: str = typer.Argument(..., help="the trigger's id")) -> None:
    """Delete it: its secret stops working, and fires not yet run do not run."""
    _change(trigger_id, "delete")


def register(app: typer.Typer, settings_loader: Callable[[], Settings]) -> None:
    """Add ``trigger`` to the ``chatgate`` command."""
    global _settings_loader
    _settings_loader = settings_loader
    app.add_typer(trigger_app, name="trigger")
