"""Marks on the message that opened a turn: none for a quick turn, working then done for a
slow one (kept fresh while it works), waiting for one that asks a person, failed always."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from agent_core.delivery import TurnState
from agent_core.events import ConversationKey
from agent_core.records import TurnRecord
from agent_core.testing import RecordingOutbound
from agent_core.turn_marks import TurnMarks

_WHERE = ConversationKey(platform="slack", workspace="T1", channel="C1", thread="1.0")


def _turn(reply_to: str | None = "1.5") -> TurnRecord:
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
    )


async def _marks(
    seconds: float, end: TurnState, **turn: str | None
) -> list[tuple[str, TurnState, TurnState | None]]:
    outbound = RecordingOutbound()
    marks = TurnMarks(outbound, _turn(**turn), after=0.05, every=0.1)
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
