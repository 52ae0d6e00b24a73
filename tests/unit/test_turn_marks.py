"""Marks on the message that opened a turn: none for a quick turn, working then done for a
slow one (kept fresh while it works), waiting for one that asks a person, failed always; a
mark journaled by an earlier process (or ``received`` while the message waited) is the one
the next replaces, and each change is journaled once."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from agent_core.events import ConversationKey
from agent_core.records import TurnRecord, TurnState
from agent_core.testing import RecordingOutbound
from agent_core.turn_marks import TurnMarks, mark_received

_WHERE = ConversationKey(platform="slack", workspace="T1", channel="C1", thread="1.0")


def _turn(reply_to: str | None = "1.5", marked: TurnState | None = None) -> TurnRecord:
    return TurnRecord(
        id=7,
        conversation_id="c",
        conversation=_WHERE,
        status="running",
        attempts=0,
        user="slack:U1",
        trigger_text="hi",
        reply_to=reply_to,
        created_at=datetime.now(UTC),
        marked=marked,
    )


async def _marks(
    seconds: float,
    end: TurnState,
    saved: list[tuple[int, TurnState]] | None = None,
    **turn: Any,
) -> list[tuple[str, TurnState, TurnState | None]]:
    outbound = RecordingOutbound()

    async def save(turn_id: int, state: TurnState) -> None:
        if saved is not None:
            saved.append((turn_id, state))

    marks = TurnMarks(outbound, _turn(**turn), saved=save, after=0.05, every=0.1)
    marks.start()
    await asyncio.sleep(seconds)
    await marks.end(end)
    return outbound.marks


async def test_a_quick_turn_is_not_marked_but_a_failed_one_is() -> None:
    assert await _marks(0.0, "done") == []
    assert await _marks(0.0, "failed") == [("1.5", "failed", None)]


async def test_a_slow_turn_is_marked_working_kept_fresh_then_done() -> None:
    marks = await _marks(0.28, "done")
    assert marks[0] == ("1.5", "working", None)
    assert marks[1:-1]
    assert set(marks[1:-1]) == {("1.5", "working", "working")}
    assert marks[-1] == ("1.5", "done", "working")


async def test_a_turn_that_waits_for_a_person_is_marked_so() -> None:
    assert (await _marks(0.08, "waiting"))[-1] == ("1.5", "waiting", "working")


async def test_a_turn_with_no_message_to_mark_is_left_alone() -> None:
    assert await _marks(0.2, "failed", reply_to=None) == []


async def test_each_change_is_journaled_once() -> None:
    saved: list[tuple[int, TurnState]] = []
    await _marks(0.28, "done", saved)
    assert saved == [(7, "working"), (7, "done")]


async def test_a_mark_from_before_is_replaced_even_when_the_turn_is_quick() -> None:
    """A message marked ``received`` while it waited (or ``working`` by a process that
    died): its turn's end replaces that mark, however quick the turn."""
    assert await _marks(0.0, "done", marked="received") == [("1.5", "done", "received")]
    assert (await _marks(0.08, "done", marked="working"))[0] == ("1.5", "working", "working")
    assert (await _marks(0.08, "done", marked="working"))[-1] == ("1.5", "done", "working")


async def test_a_waiting_message_is_journaled_received_before_it_is_marked() -> None:
    order: list[str] = []

    class Outbound(RecordingOutbound):
        async def mark(self, *args: Any, **kwargs: Any) -> None:
            order.append("marked")
            raise RuntimeError("the platform is down")  # logged, never raised

    async def save(turn_id: int, state: TurnState) -> None:
        order.append(f"saved {turn_id} {state}")

    await mark_received(Outbound(), _WHERE, "1.6", 8, saved=save)
    assert order == ["saved 8 received", "marked"]
