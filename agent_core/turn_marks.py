"""What a turn is doing, shown on the message that opened it: a reaction (working, waiting
for a person, done, failed) and a typing indicator while it works, where the platform has
them (``Outbound.mark``).

Like a reply shown as it is written, nothing is shown for a turn that answers quickly: the
reply is the sign. Once a turn has worked ``after`` seconds it is marked ``working`` (and
marked again every ``every`` seconds, which keeps a typing indicator alive); a turn that
then waits for a person is marked ``waiting``, and a marked turn ends ``done``. A turn that
fails is marked ``failed`` however quick it was. A mark that fails is logged and never the
turn's failure.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from agent_core.delivery import Outbound, TurnState
from agent_core.records import TurnRecord

log = structlog.get_logger("chatgate.marks")

AFTER_SECONDS = 1.0
EVERY_SECONDS = 4.0


class TurnMarks:
    """One turn's marks, from :meth:`start` to :meth:`end`."""

    def __init__(
        self,
        outbound: Outbound,
        turn: TurnRecord,
        *,
        after: float = AFTER_SECONDS,
        every: float = EVERY_SECONDS,
    ) -> None:
        self._outbound = outbound
        self._turn = turn
        self._after = after
        self._every = every
        self._shown: TurnState | None = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Mark the turn ``working`` once it has worked a while, and keep the mark fresh
        (a timer until then, not a task: most turns are over before it)."""
        if self._turn.reply_to is not None:
            self._timer = asyncio.get_running_loop().call_later(self._after, self._begin)

    def _begin(self) -> None:
        self._timer = None
        self._task = asyncio.create_task(self._working(), name="turn marks")

    async def _working(self) -> None:
        while True:
            await self._mark("working")
            await asyncio.sleep(self._every)

    async def stop(self) -> None:
        """Stop marking the turn ``working`` (it stopped working, or this process stops)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def end(self, state: TurnState) -> None:
        """The turn stopped working: it waits for a person, or is ``done`` or ``failed``."""
        await self.stop()
        if self._turn.reply_to is not None and (self._shown is not None or state == "failed"):
            await self._mark(state)

    async def _mark(self, state: TurnState) -> None:
        assert self._turn.reply_to is not None
        try:
            await self._outbound.mark(
                self._turn.conversation, self._turn.reply_to, state, previous=self._shown
            )
        except Exception as exc:
            log.warning("marking the turn's message failed", state=state, error=str(exc))
            return
        self._shown = state
