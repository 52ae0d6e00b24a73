"""Any adapter in the real gateway (``build_app``): what the gateway does with what an
adapter hands its sink, seen through ``adapters.testing.FakeAdapter``."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from adapters.base import ChatAdapter, GatewayHooks, NotStoredInTime
from adapters.registry import build_adapters
from adapters.testing import FakeAdapter
from adapters.web.send import WebHub
from agent_core.events import ButtonPress, InboundMessage, Platform
from agent_core.settings import Settings
from agent_core.storage.database import sqlite_path
from gateway.app import build_app
from gateway.runtime import RUNTIME
from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import settings_for

pytestmark = pytest.mark.any_database

Client = TestClient[Any, Any]


def _message(
    text: str, *, event: str, thread: str = "T1", addressed: bool = True
) -> InboundMessage:
    return InboundMessage(
        platform="slack",
        workspace="W1",
        channel="C1",
        thread=thread,
        user="slack:U1",
        text=text,
        platform_event_id=event,
        raw={"addressed": addressed},
    )


@pytest.fixture
async def gateway(
    database_url: str, model_server: FakeModelServer
) -> AsyncIterator[Callable[..., Any]]:
    """Start the gateway with a fake Slack adapter beside the registry's; returns it with
    its client."""
    started: list[Client] = []

    async def start(**extra: str) -> tuple[FakeAdapter, Client]:
        fake = FakeAdapter("slack")

        def adapters(
            settings: Settings, *, hooks: GatewayHooks | None = None, hub: WebHub | None = None
        ) -> dict[Platform, ChatAdapter]:
            return {**build_adapters(settings, hooks=hooks, hub=hub), "slack": fake}

        settings = settings_for(database_url, model_server, CHATGATE_ACCESS="open", **extra)
        client = TestClient(TestServer(build_app(settings, adapters=adapters), host="127.0.0.1"))
        await client.start_server()
        started.append(client)
        return fake, client

    yield start
    for client in started:
        await client.close()


async def _until(condition: Callable[[], bool], timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_an_adapters_message_is_stored_answered_and_sent_back_through_it(
    gateway: Any, model_server: FakeModelServer
) -> None:
    """The sink stores the message (what the ledger said comes back), the turn runs, and
    the reply goes out through the adapter's own sender, in the same conversation; the
    same event again is a duplicate."""
    model_server.script("Hello through the adapter")
    fake, _client = await gateway()
    await _until(fake.running.is_set)
    accepted = await fake.deliver(_message("hi", event="m1"))
    assert accepted is not None
    assert not accepted.duplicate
    assert accepted.turn_id
    await _until(lambda: len(fake.sender.sent) == 1)
    [reply] = fake.sender.sent
    assert reply.text == "Hello through the adapter"
    assert reply.conversation == _message("hi", event="m1").conversation
    again = await fake.deliver(_message("hi", event="m1"))
    assert again is not None
    assert again.duplicate
    assert again.turn_id == accepted.turn_id
    await asyncio.sleep(0.3)
    assert len(model_server.requests) == 1
    assert len(fake.sender.sent) == 1


async def test_a_reply_in_a_thread_counts_only_where_the_agent_talks(
    gateway: Any, model_server: FakeModelServer
) -> None:
    """A message that does not address the bot is dropped in a thread the agent has no
    conversation in, and accepted in one it has."""
    fake, client = await gateway()
    dropped = await fake.deliver(_message("aside", event="m1", thread="T9", addressed=False))
    assert dropped is None
    store = client.app[RUNTIME].store
    assert (
        await store.conversation_id_for(_message("x", event="x", thread="T9").conversation) is None
    )
    await fake.deliver(_message("start here", event="m2", thread="T2"))
    followed = await fake.deliver(_message("and more", event="m3", thread="T2", addressed=False))
    assert followed is not None
    assert followed.turn_id
    await _until(lambda: len(fake.sender.sent) == 2)
    assert len(model_server.requests) == 2


async def test_a_deadline_answers_the_platform_in_time_and_the_work_goes_on(
    gateway: Any, model_server: FakeModelServer, database_url: str
) -> None:
    """With a deadline the database does not meet (SQLite's write lock held elsewhere: a
    free SQLite stores the message at once) the sink raises before the message is stored
    (the platform is told it was not received, and delivers it again); it is stored and
    answered all the same, and the platform's second delivery is a duplicate."""
    fake, _client = await gateway()
    path = sqlite_path(database_url)
    holder = sqlite3.connect(path, isolation_level=None) if path is not None else None
    if holder is not None:
        holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(NotStoredInTime):
            await fake.deliver(_message("quick", event="m1"), deadline=0.2 if holder else 0)
    finally:
        if holder is not None:
            holder.rollback()
            holder.close()
    await _until(lambda: len(fake.sender.sent) == 1)
    assert fake.sender.sent[0].text.startswith("echo:")
    again = await fake.deliver(_message("quick", event="m1"), deadline=5)
    assert again is not None
    assert again.duplicate
    assert len(model_server.requests) == 1


async def test_a_press_that_decides_nothing_is_refused_to_the_presser_alone(
    gateway: Any,
) -> None:
    """A press on an approval that does not exist reaches ``refuse`` with the reason, and
    nothing is sent to the conversation."""
    fake, _client = await gateway()
    told: list[str] = []

    async def refuse(text: str) -> None:
        told.append(text)

    press = ButtonPress(
        platform="slack",
        workspace="W1",
        channel="C1",
        thread="T1",
        user="slack:U1",
        approval_id="ap_000000000000",
        action="approve",
        platform_event_id="act:1",
    )
    assert await fake.deliver(press, refuse=refuse) is None
    assert told == ["There is no approval ap_000000000000."]
    assert fake.sender.sent == []


async def test_readiness_follows_the_adapter_and_shutdown_stops_and_closes_it(
    gateway: Any,
) -> None:
    """``/readyz`` answers 503 with the adapter's reason while it has one; at shutdown its
    connection ends and its sender is closed."""
    fake, client = await gateway()
    await _until(fake.running.is_set)
    assert fake.sender.open_count == 1
    fake.not_ready = "slack: not connected (fake)"
    response = await client.get("/readyz")
    assert response.status == 503
    assert (await response.json())["reason"] == "slack: not connected (fake)"
    fake.not_ready = None
    assert (await client.get("/readyz")).status == 200
    await client.close()
    assert fake.stopped
    assert fake.sender.closed


async def test_an_unconfigured_platforms_route_says_what_would_configure_it(
    gateway: Any,
) -> None:
    """Without a real Telegram adapter, its webhook route answers 404 naming the settings."""
    _fake, client = await gateway()
    response = await client.post("/telegram/webhook", json={"update_id": 1})
    assert response.status == 404
    assert "TELEGRAM_WEBHOOK_SECRET" in (await response.json())["error"]
