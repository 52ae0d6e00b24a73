"""Two gateway processes on one database: the ledger, the order and the leases hold across
them, and one takes over the other's turn when it dies."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from agent_core.storage.database import Database
from agent_core.storage.schema import conversations
from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer, Scripted


@pytest.fixture
def pair(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    """Gateways a and b, same database, same fake model."""
    settings = model_server.settings()
    gateways = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        gateways.append(
            GatewayProcess(database_url=database_url, workdir=tmp_path / name, **settings)
        )
    for gateway in gateways:
        gateway.start()
    yield gateways[0], gateways[1]
    for gateway in gateways:
        gateway.stop()


def test_messages_through_both_gateways_are_answered_once_in_order(
    pair: tuple[GatewayProcess, GatewayProcess], model_server: FakeModelServer
) -> None:
    """Alternate gateways for one conversation, redeliver through the other: one answer
    per message, in the order sent."""
    a, b = pair
    conversation = ""
    for index in range(6):
        gateway, other = (a, b) if index % 2 == 0 else (b, a)
        accepted = gateway.post("shared", f"m{index}", id=f"s{index}")
        conversation = accepted["conversation_id"]
        assert other.post("shared", f"m{index}", id=f"s{index}")["duplicate"] is True
    items = a.wait_for_replies(conversation, 6)
    time.sleep(1)
    items = b.messages(conversation)
    assistant = [item["text"] for item in items if item["role"] == "assistant"]
    assert assistant == [f"echo: m{index}" for index in range(6)]
    assert len(model_server.requests) == 6


def test_a_surviving_gateway_finishes_the_dead_ones_turn(
    pair: tuple[GatewayProcess, GatewayProcess],
    model_server: FakeModelServer,
    database_url: str,
) -> None:
    """SIGKILL the gateway running a turn: the other takes it over when the lease expires."""
    never = threading.Event()
    model_server.script(
        Scripted(text="lost with the dead one", gate=never), "finished by the survivor"
    )
    accepted = pair[0].post("takeover", "hello", id="t-1")
    model_server.wait_for_requests(1)
    # Either gateway may have taken the turn (b's sweeper can win the race): kill the
    # one that holds the conversation's lease.
    holder = asyncio.run(_lease_holder_pid(database_url, accepted["conversation_id"]))
    first, second = pair
    running, survivor = (first, second) if first.pid == holder else (second, first)
    assert running.pid == holder
    running.kill()
    # The lease lapses 2 s after the kill; the survivor may still be importing litellm.
    items = survivor.wait_for_replies(accepted["conversation_id"], 1, timeout=90)
    time.sleep(0.5)
    items = survivor.messages(accepted["conversation_id"])
    assert [item["text"] for item in items if item["role"] == "assistant"] == [
        "finished by the survivor"
    ]
    assert len(model_server.requests) == 2


async def _lease_holder_pid(database_url: str, conversation_id: str) -> int:
    database = Database(database_url)
    try:
        owner = await database.read(
            lambda conn: conn.execute(
                select(conversations.c.lease_owner).where(conversations.c.id == conversation_id)
            ).scalar_one()
        )
    finally:
        await database.dispose()
    return int(str(owner).split(":")[1])
