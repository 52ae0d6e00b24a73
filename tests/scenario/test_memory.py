"""Memory through the real wiring: the model calls remember in one conversation and recall
in another; the fact reaches the model for the same person and not for someone else."""

from __future__ import annotations

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
