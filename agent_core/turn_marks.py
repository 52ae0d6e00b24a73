"""What a turn is doing, shown on the message that opened it: a reaction (received, working,
waiting for a person, done, failed) and a typing indicator while it works, where the
platform has them (``Outbound.mark``).

Like a reply shown as it is written, nothing is shown for a turn that answers quickly: the
reply is the sign. Once a turn has worked ``after`` seconds it is marked ``working`` (and
marked again every ``every`` seconds, which keeps a typing indicator alive); a turn that
then waits for a person is marked ``waiting``, and a marked turn ends ``done``. A turn that
fails is marked ``failed`` however quick it was. A mark that fails is logged and never the
turn's failure.

A message that comes while its conversation's turn runs (busy mode ``queue``) is marked
``received`` at once (:func:`mark_received`): it waits, and the person should see it was
heard. Each mark is journaled with the turn (``turns.marked``), so the next one replaces
it, in whichever process runs the turn and after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from agent_core.delivery import Outbound
from agent_core.events import ConversationKey
from agent_core.records import TurnRecord, TurnState

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
        saved: Callable[[int, TurnState], Awaitable[None]] | None = None,
        after: float = AFTER_SECONDS,
        every: float = EVERY_SECONDS,
    ) -> None:
        self._outbound = outbound
        self._turn = turn
        self._saved = saved
        self._after = after
        self._every = every
        self._shown: TurnState | None = turn.marked
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
        if state != self._shown:
            self._shown = state
            await _save(self._saved, self._turn.id, state)


async def mark_received(
    outbound: Outbound,
    conversation: ConversationKey,
    message_id: str,
    turn_id: int,
    *,
    saved: Callable[[int, TurnState], Awaitable[None]],
) -> None:
    """Mark a message whose turn waits behind the running one ``received``: journaled
    first, so the turn that answers it replaces the mark even if it starts at once."""
    await _save(saved, turn_id, "received")
    try:
        await outbound.mark(conversation, message_id, "received", previous=None)
    except Exception as exc:
        log.warning("marking a waiting message failed", error=str(exc))


async def _save(
    saved: Callable[[int, TurnState], Awaitable[None]] | None, turn_id: int, state: TurnState
) -> None:
    if saved is None:
        return
    try:
        await saved(turn_id, state)
    except Exception as exc:  # the mark is shown; the next one may leave it beside its own
        log.warning("journaling a turn's mark failed", state=state, error=str(exc))


class SessionStatus:
    """The turn's state in its conversation's own session status, where the platform has
    one (``Outbound.session``; Slack's agent sessions, whose Stop button shows while the
    session works): ``working`` as the turn starts (sent beside its first model call, not
    before it), then ``waiting`` or ``done``/``failed``. A status that fails is logged."""

    def __init__(self, outbound: Outbound, turn: TurnRecord) -> None:
        self._outbound = outbound
        self._turn = turn
        self._started: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Say the turn works, in the background."""
        self._started = asyncio.create_task(self._show("working"), name="session status")

    async def end(self, state: TurnState) -> None:
        """Say it waits for a person, or is done (after the start was said)."""
        started, self._started = self._started, None
        if started is not None:
            await started
        await self._show(state)

    async def _show(self, state: TurnState) -> None:
        try:
            await self._outbound.session(
                self._turn.conversation, state, title=self._turn.trigger_text, user=self._turn.user
            )
        except Exception as exc:
            log.warning("the session status failed", state=state, error=str(exc))
