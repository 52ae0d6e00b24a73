"""The stop signal a running turn checks: a model call cut short by ``stop``, not by the
turn's own cancellation, and a call never started when the stop came first."""

from __future__ import annotations

import asyncio

import pytest

from agent_core.errors import Stopped
from agent_core.turn_stop import StopSignal, watching


async def _slow() -> str:
    await asyncio.sleep(30)
    return "late"


async def test_a_model_call_under_way_is_cut_by_a_stop() -> None:
    signal = StopSignal()
    racing = asyncio.ensure_future(signal.race(_slow(), 4))
    await asyncio.sleep(0.01)
    signal.stop("web:boss")
    with pytest.raises(Stopped) as stopped:
        await racing
    assert (stopped.value.by, stopped.value.next_seq) == ("web:boss", 4)


async def test_a_stop_first_means_the_call_never_starts() -> None:
    """No "coroutine was never awaited" either (warnings are errors here)."""
    signal = StopSignal()
    signal.stop("web:boss")
    with pytest.raises(Stopped):
        await signal.race(_slow(), 2)


async def test_the_turn_s_own_cancellation_is_not_taken_for_a_stop() -> None:
    signal = StopSignal()
    racing = asyncio.ensure_future(signal.race(_slow(), 2))
    await asyncio.sleep(0.01)
    signal.stop("web:boss")  # both at once: the turn is being cancelled (a drain)
    racing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await racing


async def test_the_journal_is_read_while_the_turn_runs() -> None:
    asked: list[str | None] = [None, None, "slack:U1"]

    async def read() -> str | None:
        return asked.pop(0) if asked else "slack:U1"

    async with watching(read, poll=0.01) as signal:
        for _ in range(100):
            if signal.by is not None:
                break
            await asyncio.sleep(0.01)
    assert signal.by == "slack:U1"
