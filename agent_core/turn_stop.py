"""How ``stop`` reaches a running turn: at once in the process that runs it (the chat
command's process tells :meth:`StopSignal.stop` through the runner), and from any other
process through the journal (``turns.stop_requested_by``), read every ``poll`` seconds
while the turn runs. A turn checks at its step boundaries (before a model call, before a
round of tools) and cuts a model call short; a tool call under way is never cut in half.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from agent_core.errors import Stopped

T = TypeVar("T")

POLL_SECONDS = 2.0
_INTERRUPT = "interrupt:"


def interrupted_by(user: str) -> str:
    """How a turn is asked to stop for a newer message from ``user`` (busy mode
    ``interrupt``): it ends quietly, and the newer message's turn answers both."""
    return _INTERRUPT + user


def interrupter(by: str) -> str | None:
    """Who interrupted the turn with a newer message, when that is why it stops."""
    return by.removeprefix(_INTERRUPT) if by.startswith(_INTERRUPT) else None


class StopSignal:
    """One running turn's stop: set by :meth:`stop` or found in the journal."""

    def __init__(self) -> None:
        self.by: str | None = None
        self._cuttable: asyncio.Future[Any] | None = None  # a model call under way

    def stop(self, by: str) -> None:
        """Stop the turn at its next step boundary (a model call under way is cut)."""
        if self.by is None:
            self.by = by
        if self._cuttable is not None:
            self._cuttable.cancel()

    def check(self, next_seq: int) -> None:
        """Raise ``Stopped`` when someone asked; ``next_seq`` is the journal's next free step."""
        if self.by is not None:
            raise Stopped(self.by, next_seq)

    async def race(self, work: Awaitable[T], next_seq: int) -> T:
        """``work``, unless a stop comes first: then it is cancelled and ``Stopped`` raised."""
        if self.by is not None:
            if inspect.iscoroutine(work):
                work.close()  # never started
            raise Stopped(self.by, next_seq)
        task = asyncio.ensure_future(work)
        self._cuttable = task
        try:
            return await task
        except asyncio.CancelledError:
            if task.cancelled() and self.by is not None and not _cancelling():
                raise Stopped(self.by, next_seq) from None
            raise
        finally:
            self._cuttable = None


def _cancelling() -> bool:
    """Whether the task running this is itself being cancelled (not only what it awaits)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


@contextlib.asynccontextmanager
async def watching(
    read: Callable[[], Awaitable[str | None]], *, poll: float = POLL_SECONDS
) -> AsyncIterator[StopSignal]:
    """A :class:`StopSignal` for the block, which also reads the journal (``read``: who
    asked, if anyone) every ``poll`` seconds; a failed read is tried at the next poll."""
    signal = StopSignal()
    watcher: asyncio.Task[None] | None = None

    async def watch() -> None:
        while signal.by is None:
            with contextlib.suppress(Exception):
                if (by := await read()) is not None:
                    signal.stop(by)
                    return
            await asyncio.sleep(poll)

    def begin() -> None:
        nonlocal watcher
        watcher = asyncio.create_task(watch(), name="stop watch")

    # A timer, not a task, until the first read is due: most turns are over before it.
    timer = asyncio.get_running_loop().call_later(poll, begin)
    try:
        yield signal
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


class RunningTurns:
    """The stop signals of the turns running in this process, by turn id: ``stop`` tells
    one at once; :meth:`watch` also reads the journal (``stop_requested``) for a stop said
    through another process."""

    def __init__(self, stop_requested: Callable[[int], Awaitable[str | None]]) -> None:
        self._stop_requested = stop_requested
        self._signals: dict[int, StopSignal] = {}

    def stop(self, turn_id: int, *, by: str) -> bool:
        """Stop a turn running here at its next step boundary (False: it runs nowhere
        here; the journal reaches it wherever it runs)."""
        signal = self._signals.get(turn_id)
        if signal is None:
            return False
        signal.stop(by)
        return True

    @contextlib.asynccontextmanager
    async def watch(self, turn_id: int) -> AsyncIterator[StopSignal]:
        """The turn's stop signal while it runs."""
        async with watching(lambda: self._stop_requested(turn_id)) as signal:
            self._signals[turn_id] = signal
            try:
                yield signal
            finally:
                self._signals.pop(turn_id, None)
