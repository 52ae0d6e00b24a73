"""Discord's catch-up: what was written to the bot while no gateway session heard it.

Discord's gateway has no acknowledgement and no redelivery. A RESUME replays what a
session missed, but a new session (an IDENTIFY: the first one after a crash, a deploy or
a lock taken over from a dead gateway, or after Discord refused a RESUME) starts from
now. So whoever holds the session keeps a mark in the database, ``heard_until``: every
``MARK_EVERY`` seconds while connected, the time before which every message it heard is
stored (never past a message still being stored, and not while a catch-up is running).

A new session reads, over REST, what was written after the mark less ``MARGIN`` (how long
the gateway may take to notice a connection that died silently, and the order messages
from different channels arrive in), at most ``horizon`` seconds back, in the channels
where something was written since: guild channels and threads whose last message is newer
(their ``last_message_id``, from GUILD_CREATE), and the DMs of conversations active in the
last ``DM_LOOKBACK``. Each message goes the way a live one goes; the ingress ledger drops
what was stored already. A live message in a channel being caught up waits until that
channel is done, so turns keep their order.

Not caught up: button presses (Discord fails an interaction not answered within three
seconds; the person presses again), DMs in conversations idle for longer than
``DM_LOOKBACK``, and in one channel more than ``PER_CHANNEL`` messages (the newest are
read).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog

from adapters.base import GatewayHooks
from adapters.discord.parse import DM, message_event_id
from agent_core.events import utcnow

if TYPE_CHECKING:
    import discord

log = structlog.get_logger("chatgate.discord")

MARGIN = timedelta(minutes=3)
MARK_EVERY = 10.0
DM_LOOKBACK = timedelta(days=30)
PER_CHANNEL = 500
# How long a live message waits for its channel's catch-up at most.
_LIVE_WAIT = 120.0
_CONCURRENCY = 4
# How long a catch-up keeps asking a database that does not answer.
_PLAN_SECONDS = 600.0


class Mark:
    """The time before which every message this session heard is stored."""

    def __init__(self) -> None:
        self._storing: dict[int, None] = {}
        self._held = False

    def storing(self, message_id: int) -> None:
        """A message is being stored (the mark stays before it until it is)."""
        self._storing[message_id] = None

    def stored(self, message_id: int) -> None:
        """It is stored, or set aside."""
        self._storing.pop(message_id, None)

    def hold(self) -> None:
        """A new session: what came before it is not known to be stored until the
        catch-up is done."""
        self._held = True

    def release(self) -> None:
        """Caught up (or resumed: Discord replayed what was missed)."""
        self._held = False

    def until(self, now: datetime) -> datetime | None:
        """The mark to keep now, or None to keep the one kept before."""
        if self._held:
            return None
        if not self._storing:
            return now
        from discord.utils import snowflake_time

        return min(now, snowflake_time(min(self._storing)))


class CatchUp:
    """Reads what a new session missed, and holds live messages in the channels it reads
    until each is done."""

    def __init__(self, hooks: GatewayHooks, *, horizon: float) -> None:
        self._hooks = hooks
        self._horizon = timedelta(seconds=horizon)
        self._planned = asyncio.Event()
        self._planned.set()
        self._channels: dict[int, asyncio.Event] = {}

    def connecting(self) -> None:
        """A new session began (READY): live messages wait until the catch-up knows
        which channels it reads."""
        self._planned.clear()

    def not_needed(self) -> None:
        """No catch-up after all (the session resumed, or the connection was lost)."""
        self._planned.set()

    async def live(self, channel_id: int) -> None:
        """Wait, at most ``_LIVE_WAIT`` seconds, until ``channel_id`` is caught up."""
        if self._planned.is_set() and channel_id not in self._channels:
            return  # the common case: no catch-up running here
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_LIVE_WAIT):
                await self._planned.wait()
                done = self._channels.get(channel_id)
                if done is not None:
                    await done.wait()

    async def run(
        self, client: discord.Client, receive: Callable[[discord.Message], Awaitable[bool]]
    ) -> None:
        """Read what was written since the mark in every channel where something was,
        oldest first through ``receive`` (True when it opened a turn)."""
        if self._horizon <= timedelta(0):
            self._planned.set()
            return
        started = time.monotonic()
        try:
            since, channels = await self._plan(client)
        except Exception:
            log.exception("discord catch-up could not start; messages sent while away are lost")
            self._planned.set()
            return
        mine = {channel.id: asyncio.Event() for channel in channels}
        self._channels.update(mine)
        self._planned.set()
        if since is None:
            return
        figures = {"channels": len(channels), "read": 0, "stored": 0, "answered": 0, "failed": 0}
        limit = asyncio.Semaphore(_CONCURRENCY)

        async def one(channel: Any) -> None:
            async with limit:
                try:
                    messages = await _read(channel, since)
                    stored = await self._stored(messages)
                    figures["read"] += len(messages)
                    figures["stored"] += len(stored)
                    for message in messages:
                        if message_event_id(message.id) not in stored and await receive(message):
                            figures["answered"] += 1
                except Exception as exc:
                    figures["failed"] += 1
                    log.error(
                        "discord catch-up could not read a channel",
                        channel_id=str(channel.id),
                        error=repr(exc),
                    )
                finally:
                    done = mine[channel.id]
                    done.set()
                    if self._channels.get(channel.id) is done:
                        del self._channels[channel.id]

        await asyncio.gather(*(one(channel) for channel in channels))
        log.info(
            "discord caught up",
            since=since.isoformat(),
            took_seconds=round(time.monotonic() - started, 2),
            **figures,
        )

    async def _stored(self, messages: list[discord.Message]) -> set[str]:
        """Which of ``messages`` are stored already: most of what is read is what the
        last session heard, and one read skips it instead of a rejected insert for each.
        When the database does not answer, none is known (each then waits to be stored)."""
        try:
            return await self._hooks.ledgered("discord", [message_event_id(m.id) for m in messages])
        except Exception as exc:
            log.warning("discord catch-up could not tell what is stored", error=repr(exc))
            return set()

    async def _plan(self, client: discord.Client) -> tuple[datetime | None, list[Any]]:
        """Where to read from and which channels, asking the database until it answers
        (it may be down as the session starts), for ``_PLAN_SECONDS`` at most."""
        deadline = time.monotonic() + _PLAN_SECONDS
        attempt = 0
        while True:
            try:
                since = await self._since()
                return since, [] if since is None else await self._channels_since(client, since)
            except Exception as exc:
                attempt += 1
                if time.monotonic() > deadline:
                    raise
                log.warning("discord catch-up waits for the database", error=repr(exc))
                await asyncio.sleep(min(10.0, 0.5 * 2**attempt))

    async def _since(self) -> datetime | None:
        """Where to read from: the kept mark less the margin, within the horizon; None
        when no session ever kept one (nothing was heard before, so nothing was missed)."""
        heard = await self._hooks.heard_until("discord")
        if heard is None:
            return None
        return max(heard - MARGIN, utcnow() - self._horizon)

    async def _channels_since(self, client: discord.Client, since: datetime) -> list[Any]:
        import discord
        from discord.utils import time_snowflake

        after = time_snowflake(since)
        found: dict[int, Any] = {}
        for guild in client.guilds:
            me = guild.me
            for channel in [*guild.channels, *guild.threads]:
                last = getattr(channel, "last_message_id", None)
                if last is None or last <= after:
                    continue
                if not isinstance(channel, discord.abc.Messageable):
                    continue
                allowed = channel.permissions_for(me) if me is not None else None
                if allowed is not None and not allowed.read_message_history:
                    continue
                found[channel.id] = channel
        recent = await self._hooks.recent("discord", utcnow() - DM_LOOKBACK)
        for key in recent:
            if key.workspace != DM:
                continue
            channel_id = int(key.channel)
            if channel_id not in found:
                found[channel_id] = client.get_partial_messageable(
                    channel_id, type=discord.ChannelType.private
                )
        return list(found.values())


async def _read(channel: Any, since: datetime) -> list[discord.Message]:
    """One channel's messages since ``since`` (the newest ``PER_CHANNEL``), oldest first."""
    import discord
    from discord.utils import time_snowflake

    after = discord.Object(id=time_snowflake(since))
    newest_first = [
        message
        async for message in channel.history(limit=PER_CHANNEL, after=after, oldest_first=False)
    ]
    if len(newest_first) == PER_CHANNEL:
        log.warning(
            "discord catch-up read only the newest messages of a busy channel",
            channel_id=str(channel.id),
            read=PER_CHANNEL,
        )
    newest_first.reverse()
    return newest_first
