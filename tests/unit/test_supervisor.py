"""Lanes: serial per conversation, parallel across them, bounded, drained on stop."""

from __future__ import annotations

import asyncio

from gateway.supervisor import Supervisor


async def test_one_conversation_runs_serially_and_reruns_when_woken() -> None:
    """A submit during a run makes the lane go round again, never two runs at once."""
    running: dict[str, int] = {}
    runs: list[str] = []
    overlap = False

    async def work(conversation_id: str) -> None:
        nonlocal overlap
        running[conversation_id] = running.get(conversation_id, 0) + 1
        overlap = overlap or running[conversation_id] > 1
        await asyncio.sleep(0.02)
        runs.append(conversation_id)
        running[conversation_id] -= 1

    supervisor = Supervisor(work, max_concurrent=4)
    supervisor.submit("a")
    await asyncio.sleep(0.005)
    supervisor.submit("a")
    supervisor.submit("a")
    while supervisor.active:
        await asyncio.sleep(0.01)
    assert runs == ["a", "a"]
    assert not overlap


async def test_conversations_run_in_parallel_up_to_the_bound() -> None:
    """Twenty conversations with a bound of five: never more than five at once."""
    current = peak = 0

    async def work(conversation_id: str) -> None:
        nonlocal current, peak
        current += 1
        peak = max(peak, current)
        await asyncio.sleep(0.02)
        current -= 1

    supervisor = Supervisor(work, max_concurrent=5)
    for index in range(20):
        supervisor.submit(f"c{index}")
    while supervisor.active:
        await asyncio.sleep(0.01)
    assert peak == 5


async def test_drain_waits_for_running_work_and_refuses_new() -> None:
    """Drain lets in-flight work finish, and submit after it is refused."""
    finished: list[str] = []

    async def work(conversation_id: str) -> None:
        await asyncio.sleep(0.1)
        finished.append(conversation_id)

    supervisor = Supervisor(work, max_concurrent=2)
    supervisor.submit("a")
    await asyncio.sleep(0.01)
    assert await supervisor.drain(5) == 0
    assert finished == ["a"]
    assert supervisor.submit("b") is False


async def test_drain_cancels_what_outlives_the_grace() -> None:
    """Work still running when the grace ends is cancelled (it resumes from the journal)."""
    cancelled = asyncio.Event()

    async def work(conversation_id: str) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    supervisor = Supervisor(work, max_concurrent=2)
    supervisor.submit("a")
    await asyncio.sleep(0.01)
    assert await supervisor.drain(0.05) == 1
    assert cancelled.is_set()


async def test_a_failing_lane_does_not_take_the_supervisor_down() -> None:
    """An exception in one conversation's work is logged; others keep running."""
    done: list[str] = []

    async def work(conversation_id: str) -> None:
        if conversation_id == "bad":
            raise RuntimeError("boom")
        done.append(conversation_id)

    supervisor = Supervisor(work, max_concurrent=2)
    supervisor.submit("bad")
    supervisor.submit("good")
    while supervisor.active:
        await asyncio.sleep(0.01)
    assert done == ["good"]
