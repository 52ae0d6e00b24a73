"""Connections exactly one process may hold (the Discord gateway session, Telegram's
``getUpdates``, Slack's Socket Mode): a named lock in the database, renewed while held.
Every gateway runs :class:`Holder`; one holds, the others wait and take over within about
a lease period after the holder dies."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable

import structlog

from agent_core.errors import LeaseLost
from agent_core.stores import LockStore
from agent_core.turn_lease import heartbeat

log = structlog.get_logger("chatgate.singleton")


class Holder:
    """Runs ``run()`` only while this process holds the lock ``name``."""

    def __init__(self, store: LockStore, name: str, *, owner: str, ttl: float) -> None:
        self._store = store
        self.name = name
        self._owner = owner
        self._ttl = ttl
        self.holding = False

    async def serve(self, run: Callable[[], Awaitable[None]], stopping: asyncio.Event) -> None:
        """Until ``stopping``: take the lock when it is free, run while it is ours (cancelled
        at once if it is lost), give it back when done."""
        renew = functools.partial(
            self._store.renew_lock, self.name, owner=self._owner, ttl=self._ttl
        )
        while not stopping.is_set():
            try:
                taken = await self._store.take_lock(self.name, owner=self._owner, ttl=self._ttl)
            except Exception:  # the database is down: try again later, do not give up
                log.exception("taking a lock failed", lock=self.name)
                taken = False
            if taken:
                log.info("holding", lock=self.name)
                self.holding = True
                try:
                    async with heartbeat(renew, every=self._ttl / 3, what=self.name):
                        await run()
                except LeaseLost:
                    log.warning("lost the lock: another process holds it now", lock=self.name)
                except Exception:
                    log.exception("the connection under the lock failed", lock=self.name)
                finally:
                    self.holding = False
                    with contextlib.suppress(Exception):
                        await asyncio.shield(self._store.release_lock(self.name, owner=self._owner))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(self._ttl / 3, 5.0)):
                    await stopping.wait()
