"""A reply shown while the model writes it.

A platform that can show a reply as it grows offers a :class:`LiveReply` for a turn
(``Outbound.live``). The turn streams its model calls into a :class:`Pacer`, which decides
what reaches the platform and when: nothing for a short, fast reply (it is posted once, as
it would be unstreamed); once the reply has taken longer than ``first_after`` seconds or
grown past a screen, the text so far, at most once every ``live.interval`` seconds (each
platform's pace, under its rate limits), and a status line while tools run. A failed update
(a 429, a network error) slows the pace down and is never the turn's failure: the final
reply is delivered the ordinary, journaled way, whatever was or was not shown before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from agent_core.faults import FaultPoints

log = structlog.get_logger("chatgate.live")

FIRST_AFTER_SECONDS = 1.0
SCREEN_CHARACTERS = 800
SLOWEST_INTERVAL = 30.0
# How long closing waits for an update under way: cut off, a post could reach the platform
# without its message id reaching the journal, and the reply would be posted twice.
FINISH_SECONDS = 10.0
PENDING = "pending"
"""Journaled as a turn's live message before the first update posts one: an attempt that
dies before it can journal the message's id leaves this, and the next one looks for the
message (``LiveReply.recover``) instead of posting a second."""


class LiveReply(Protocol):
    """Where one turn's reply is shown as it is written (a draft in the chat)."""

    @property
    def interval(self) -> float:
        """The fewest seconds between two updates, within the platform's limits per chat."""
        ...

    @property
    def posts(self) -> bool:
        """Whether its first update posts a message (a draft preview does not)."""
        ...

    async def recover(self) -> None:
        """An earlier attempt was about to post the message (``PENDING`` in the journal)
        and never journaled it: find it, if it was posted (``message`` is then it, else
        stays None). Where the platform cannot look it up, a second may be posted."""
        ...

    @property
    def message(self) -> str | None:
        """The platform message the reply is shown in, once there is one (a preview that is
        no message, like a Telegram draft or the web chat's, has none). It is journaled
        as soon as it exists: a resumed turn is given it back and goes on in it, and the
        reply is delivered into it."""
        ...

    async def show(self, text: str, *, status: str | None) -> None:
        """Show the reply's text so far (replacing what was shown), and ``status`` (what the
        agent is doing, e.g. running a tool) when there is one. May raise: the pacer slows
        down and tries again with newer text."""
        ...

    async def close(self) -> None:
        """The draft is over: the reply is about to be delivered, or the turn stopped
        (it waits for a person, or failed)."""
        ...


class Pacer:
    """Feeds one :class:`LiveReply` from a turn's model stream (see the module's text).

    ``heard`` is the model's ``on_text``; ``working`` says what the agent does between two
    model calls; ``close`` ends the draft. The updates run on a task of its own, so the
    model's stream never waits for the platform."""

    def __init__(
        self,
        live: LiveReply,
        *,
        posted: Callable[[str], Awaitable[None]] | None = None,
        faults: FaultPoints | None = None,
        first_after: float = FIRST_AFTER_SECONDS,
        screen: int = SCREEN_CHARACTERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._live = live
        self._posted = posted
        self._faults = faults or FaultPoints()
        self._journaled = live.message
        self._first_after = first_after
        self._screen = screen
        self._clock = clock
        self._started_at = clock()
        self._interval = live.interval
        self._latest: tuple[str, str | None] = ("", None)
        self._shown: tuple[str, str | None] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()  # no update under way
        self._idle.set()
        self.updates = 0  # how many updates reached the platform

    @property
    def showing(self) -> bool:
        """Whether the reply is being shown as it grows (it was slow, or long)."""
        return self._task is not None

    def heard(self, text: str) -> None:
        """The current model call's text so far."""
        self._latest = (text, None)
        self._poke(len(text))

    def working(self, status: str) -> None:
        """What the agent does now that the model called tools (shown under the text)."""
        self._latest = (self._latest[0], status)
        self._poke(len(self._latest[0]))

    def _poke(self, length: int) -> None:
        if self._task is None:
            slow = self._clock() - self._started_at >= self._first_after
            if not slow and length < self._screen:
                return
            self._task = asyncio.create_task(self._run(), name="live reply")
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            latest = self._latest
            if latest != self._shown:
                try:
                    self._idle.clear()
                    await self._intend()
                    await self._live.show(latest[0], status=latest[1])
                except Exception as exc:
                    self._interval = min(self._interval * 2, SLOWEST_INTERVAL)
                    log.warning(
                        "showing the reply so far failed; slowing down",
                        error=str(exc),
                        interval=self._interval,
                    )
                    self._wake.set()  # the newest text is still to be shown
                else:
                    self._shown = latest
                    self.updates += 1
                    await self._journal()
                finally:
                    self._idle.set()
            await asyncio.sleep(self._interval)

    async def _intend(self) -> None:
        """Before an update posts the message, journal that it is about to (``PENDING``);
        if the journal cannot say so, nothing is posted (the update fails, and is tried
        again later)."""
        if self._live.posts and self._live.message is None and self._journaled != PENDING:
            if self._posted is not None:
                await self._posted(PENDING)
            self._journaled = PENDING

    async def _journal(self) -> None:
        """Journal the message the first update posted (the next updates wait for it)."""
        message = self._live.message
        if message is None or message == self._journaled or self._posted is None:
            return
        self._faults.hit("after_live_post")
        try:
            await self._posted(message)
        except Exception as exc:
            # The database is down: the message is still edited and finished by this
            # attempt, and should it die, the journal's ``pending`` has the next one
            # look for it.
            log.warning("journaling the shown reply's message failed", error=str(exc))
        else:
            self._journaled = message

    async def close(self) -> None:
        """Stop updating (an update under way may finish, for up to ``FINISH_SECONDS``)
        and end the draft."""
        task, self._task = self._task, None
        if task is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FINISH_SECONDS):
                await self._idle.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await self._journal()  # an update cut off after its post
        try:
            await self._live.close()
        except Exception as exc:
            log.warning("ending the shown reply failed", error=str(exc))
