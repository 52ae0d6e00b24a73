"""Two gateway processes on one database: the ledger, the order and the leases hold across
them, and one takes over the other's turn when it dies."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    pair: tuple[GatewayProcess, GatewayProcess], model_server: FakeModelServer
) -> None:
    """SIGKILL a gateway mid-turn: the other takes the turn over when the lease expires."""
    a, b = pair
    never = threading.Event()
    model_server.script(Scripted(text="lost with a", gate=never), "finished by b")
    accepted = a.post("takeover", "hello", id="t-1")
    model_server.wait_for_requests(1)
    a.kill()
    items = b.wait_for_replies(accepted["conversation_id"], 1, timeout=30)
    time.sleep(0.5)
    items = b.messages(accepted["conversation_id"])
    assert [item["text"] for item in items if item["role"] == "assistant"] == ["finished by b"]
    assert len(model_server.requests) == 2
