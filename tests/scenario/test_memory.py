"""Memory through the real wiring: the model calls remember in one conversation and recall
in another; the fact reaches the model for the same person and not for someone else; and
facts picked out of turns by the extraction job are recalled the same way."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from agent_core.memory_upkeep import EXTRACT_ASK
from agent_core.records import MemoryRecord
from agent_core.storage.database import Database
from agent_core.storage.store import Store
from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_tool_crashes import tool_call
from tests.scenario.test_web_api import _post, _replies


async def test_a_fact_remembered_in_one_conversation_is_recalled_in_another(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    client = await make_client(model_server)
    model_server.script(
        tool_call("remember", {"fact": "Alice's on-call week starts Monday", "about": "on-call"}),
        "Noted.",
        tool_call("recall", {"query": "on-call week"}),
        "Your on-call week starts Monday.",
        tool_call("recall", {"query": "on-call week"}),
        "I do not know.",
    )
    first = await _post(client, "alice-1", "remember my on-call week starts Monday", user="alice")
    await _replies(client, first["conversation_id"], 1)
    second = await _post(client, "alice-2", "when does my on-call start?", user="alice")
    await _replies(client, second["conversation_id"], 1)
    recalled = model_server.requests[3]["messages"][-1]
    assert recalled["role"] == "tool"
    assert "Alice's on-call week starts Monday" in recalled["content"]
    other = await _post(client, "bob-1", "when does my on-call start?", user="bob")
    await _replies(client, other["conversation_id"], 1)
    nothing = model_server.requests[5]["messages"][-1]
    assert nothing["role"] == "tool"
    assert "Nothing remembered" in nothing["content"]


async def test_facts_picked_out_of_a_turn_are_recalled_for_the_same_person_only(
    make_client: ClientFactory, model_server: FakeModelServer, database: Database
) -> None:
    def extract(exchange: str) -> str:
        facts = []
        if "Orbit" in exchange.split("The assistant answered:")[0]:
            facts = [{"fact": "Alice's team is called Orbit.", "about": "team"}]
        return json.dumps({"facts": facts})

    model_server.background = {EXTRACT_ASK: extract}
    client = await make_client(model_server, CHATGATE_MEMORY_EXTRACT="true")
    first = await _post(client, "alice-1", "my team is called Orbit, by the way", user="alice")
    await _replies(client, first["conversation_id"], 1)
    small_talk = await _post(client, "alice-1", "thanks!", user="alice")
    await _replies(client, small_talk["conversation_id"], 2)

    store = Store(database)
    second = await _post(client, "alice-2", "hello", user="alice")
    bobs = await _post(client, "bob-1", "hello", user="bob")
    await _replies(client, bobs["conversation_id"], 1)
    deadline = time.monotonic() + 20
    found: list[MemoryRecord] = []
    while not found and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        found = await store.recall(
            user="web:alice", conversation_id=second["conversation_id"], query="which team"
        )
    assert [(m.fact, m.about, m.scope) for m in found] == [
        ("Alice's team is called Orbit.", "team", "user")
    ]
    assert found[0].source.startswith("extracted from turn ")
    assert (
        await store.recall(user="web:bob", conversation_id=bobs["conversation_id"], query="team")
        == []
    )
    # One extraction per answered turn (four), each with what was said and answered.
    deadline = time.monotonic() + 20
    while len(_asks(model_server)) < 4 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    said = [r["messages"][-1]["content"] for r in _asks(model_server)]
    assert len(said) == 4
    assert any("my team is called Orbit" in text and "echo: my team" in text for text in said)


def _asks(server: FakeModelServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["messages"][0]["content"].startswith(EXTRACT_ASK)]
