"""What a running turn does with the messages its person sends meanwhile (busy modes
``steer`` and ``collect``; ``queue`` leaves them to turns of their own, ``interrupt`` is
the inbound path's, through the turn's stop signal).

``steer`` takes them in before each model call, ``collect`` before the first, once nobody
has written for ``collect_seconds``. Taking them in is a journaled ``steer`` step (their
texts), so a turn resumed after a crash sends the model the same messages again.
"""

from __future__ import annotations

import asyncio

import structlog

from agent_core.events import utcnow
from agent_core.model import ChatMessage
from agent_core.records import BusyMode, TurnRecord
from agent_core.stores import Journal

log = structlog.get_logger("chatgate.turn")


class BusyModes:
    """The busy mode a turn runs under, and what it takes in."""

    def __init__(
        self, store: Journal, *, default: BusyMode = "queue", collect_seconds: float = 3.0
    ) -> None:
        self._store = store
        self._default: BusyMode = default
        self._collect_seconds = collect_seconds

    def mode(self, turn: TurnRecord) -> BusyMode:
        """The conversation's own mode (``/busy``), else the setting's."""
        return turn.busy_mode or self._default

    async def settle(self, turn: TurnRecord) -> None:
        """``collect``, before a turn's first step: wait until nobody has written in the
        conversation for ``collect_seconds`` (what came meanwhile is then taken in)."""
        if self.mode(turn) != "collect" or turn.steps:
            return
        while True:
            last = await self._store.last_message_at(turn.conversation_id)
            left = self._collect_seconds - (utcnow() - last).total_seconds() if last else 0
            if left <= 0:
                return
            await asyncio.sleep(left)

    async def take_in(
        self, turn: TurnRecord, seq: int, current: list[ChatMessage], *, first: bool
    ) -> int:
        """Before the model call at ``seq``: add to ``current`` the messages a journaled
        ``steer`` step holds there, or take in those waiting now (in ``steer``, or in
        ``collect`` before the first call); the model call's step number after it."""
        step = turn.step(seq)
        if step is not None and step.kind == "steer":
            current.extend(_taken(step.input))  # journaled: the same messages again
            return seq + 1
        mode = self.mode(turn)
        if step is None and (mode == "steer" or (mode == "collect" and first)):
            texts = await self._store.take_in(turn, seq)
            if texts:
                log.info("messages taken into the running turn", count=len(texts))
                current.extend(ChatMessage(role="user", content=text) for text in texts)
                return seq + 1
        return seq


def _taken(journaled: object) -> list[ChatMessage]:
    """The messages a ``steer`` step took into the turn."""
    texts = journaled.get("texts") if isinstance(journaled, dict) else None
    return [ChatMessage(role="user", content=str(text)) for text in texts or ()]
