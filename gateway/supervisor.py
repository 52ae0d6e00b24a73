"""Lanes: one turn at a time per conversation, many conversations at once, drained on stop.

The supervisor owns every task it starts. ``submit`` wakes a conversation's lane; the lane
calls ``work(conversation_id)`` (which runs all of its open turns) under a semaphore that
bounds how many conversations run at once. A submit that arrives while the lane runs makes
it go round once more, so a message that lands during a turn is never left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("chatgate.supervisor")


class Supervisor:
    """Runs conversation lanes with bounded concurrency and drains them on shutdown."""

    def __init__(self, work: Callable[[str], Awaitable[object]], *, max_concurrent: int) -> None:
        self._work = work
        self._slots = asyncio.Semaphore(max_concurrent)
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._closing = False
        # Called when the last lane ends (the job runner waits for that).
        self.on_idle: Callable[[], object] | None = None

    @property
    def closing(self) -> bool:
        """True once draining started: no new lanes are taken."""
        return self._closing

    @property
    def active(self) -> int:
        """How many conversation lanes exist right now (running or waiting for a slot)."""
        return len(self._lanes)

    def submit(self, conversation_id: str) -> bool:
        """Make sure the conversation's lane runs; False when draining (work stays stored)."""
        if self._closing:
            return False
        if conversation_id in self._lanes:
            self._again.add(conversation_id)
        else:
            self._lanes[conversation_id] = asyncio.create_task(
                self._lane(conversation_id), name=f"lane:{conversation_id}"
            )
        return True

    async def _lane(self, conversation_id: str) -> None:
        try:
            while True:
                self._again.discard(conversation_id)
                async with self._slots:
                    if self._closing:
                        return
                    try:
                        await self._work(conversation_id)
                    except Exception:
                        # The work is journaled; the sweeper will pick it up again.
                        log.exception("lane failed", conversation_id=conversation_id)
                        return
                if conversation_id not in self._again or self._closing:
                    return
        finally:
            self._again.discard(conversation_id)
            self._lanes.pop(conversation_id, None)
            if not self._lanes and self.on_idle is not None:
                self.on_idle()

    async def drain(self, grace: float) -> int:
        """Stop taking work, let running lanes finish for ``grace`` s, cancel the rest.

        Returns how many lanes had to be cancelled (their turns resume on the next start).
        """
        self._closing = True
        lanes = list(self._lanes.values())
        if not lanes:
            return 0
        _done, pending = await asyncio.wait(lanes, timeout=grace)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if pending:
            log.warning("drain cancelled lanes", cancelled=len(pending))
        return len(pending)
