"""Context assembly vs reading the history it packs: a conversation of 5,000 messages in
SQLite; the time to read the history the first model call of a turn reads (the store's
``start_model_call``) beside the time to pack it into a 128k-token window. Median of runs."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from agent_core.context import assemble
from agent_core.events import InboundMessage
from agent_core.history import Past
from agent_core.model import ChatMessage
from agent_core.records import TurnRecord
from agent_core.storage.database import open_database
from agent_core.storage.store import Store

HISTORY = 5000
WINDOW = 128_000
RUNS = 20


async def _fill(store: Store) -> TurnRecord:
    """A conversation with HISTORY messages in earlier turns, and a turn to answer."""
    for index in range(HISTORY // 2):
        event = InboundMessage(
            platform="web",
            workspace="local",
            channel="bench",
            user="web:bench",
            text=f"message {index}: the build for commit {index:06x} passed all 412 tests",
            platform_event_id=f"bench-{index}",
        )
        accepted = await store.accept_inbound(event, open_turn=True)
        turn = await store.begin_next_turn(accepted.conversation_id)
        assert turn is not None
        await store.record_reply_intent(
            turn,
            2,
            role="assistant",
            text=f"Noted: build {index} is green.",
            delivery_key=str(index),
        )
        await store.finish_turn(turn.id, status="done", error=None)
    last = InboundMessage(
        platform="web",
        workspace="local",
        channel="bench",
        user="web:bench",
        text="what changed since yesterday?",
        platform_event_id="bench-last",
    )
    accepted = await store.accept_inbound(last, open_turn=True)
    turn = await store.begin_next_turn(accepted.conversation_id)
    assert turn is not None
    return turn


async def _measure() -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as workdir:
        async with open_database(f"sqlite+aiosqlite:///{Path(workdir) / 'bench.db'}") as database:
            store = Store(database)
            turn = await _fill(store)
            reads: list[float] = []
            packs: list[float] = []
            current = [ChatMessage(role="user", content=turn.trigger_text)]
            for seq in range(1, RUNS + 1):
                started = time.perf_counter()
                summary, records = await store.start_model_call(
                    turn, seq, input={}, history_limit=HISTORY
                )
                reads.append(time.perf_counter() - started)
                past = Past.of(summary, records)
                assert len(past.messages) == HISTORY
                started = time.perf_counter()
                packed = assemble(
                    system="You are chatgate.",
                    summary=past.summary,
                    history=past.messages,
                    current=current,
                    budget=WINDOW,
                )
                packs.append(time.perf_counter() - started)
                assert packed.messages[-1] == current[0]
            return statistics.median(reads), statistics.median(packs)


def bench_context() -> None:
    """Print the time to assemble a 5,000-message history beside the time to read it."""
    read, pack = asyncio.run(_measure())
    print(
        f"context assembly    {pack * 1000:7.2f} ms        read {HISTORY} messages "
        f"{read * 1000:6.2f} ms   ratio {pack / read:5.2f}x"
    )


if __name__ == "__main__":
    bench_context()
