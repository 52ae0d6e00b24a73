"""Budgets through the real wiring (web chat API, real litellm, fake model): spend is
counted per call, a note warns past 80 %, and a user over the daily budget gets the stop
message with no model call, while others carry on."""

from __future__ import annotations

from gateway.runtime import RUNTIME
from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_web_api import _post, _replies


async def test_a_user_over_the_daily_budget_is_stopped_without_a_model_call(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    # What one short exchange costs in tokens, to set a budget it nearly fills.
    probe = await make_client(model_server)
    first = await _post(probe, "budget", "hello there", user="alice")
    conversation = first["conversation_id"]
    await _replies(probe, conversation, 1)
    spent = await probe.server.app[RUNTIME].store.spending(conversation, "web:alice")
    assert spent.user_day_tokens > 0
    limit = int(spent.user_day_tokens / 0.85)
    client = await make_client(model_server, CHATGATE_BUDGET_USER_DAILY_TOKENS=str(limit))
    # About 85 % used: answered, with a note.
    await _post(client, "budget", "and again", user="alice")
    items = await _replies(client, conversation, 2)
    assert items[-1]["role"] == "assistant"
    assert items[-1]["text"].endswith("of your daily budget (" + f"{limit:,} tokens) is used._")
    # Now over: the stop message, and the model is not called.
    calls = len(model_server.requests)
    await _post(client, "budget", "once more", user="alice")
    items = await _replies(client, conversation, 3)
    assert items[-1]["role"] == "system"
    assert items[-1]["text"].startswith(f"Budget reached: your daily budget is {limit:,} tokens")
    assert "CHATGATE_BUDGET_USER_DAILY_TOKENS" in items[-1]["text"]
    assert len(model_server.requests) == calls
    # Someone else's day is their own.
    other = await _post(client, "budget-bob", "hi", user="bob")
    items = await _replies(client, other["conversation_id"], 1)
    assert items[-1]["role"] == "assistant"
    assert len(model_server.requests) == calls + 1
    # usage shows the figures beside the budget.
    await _post(client, "budget", "/usage", user="alice")
    items = await _replies(client, conversation, 4)
    now = await client.server.app[RUNTIME].store.spending(conversation, "web:alice")
    assert now.user_day_tokens > spent.user_day_tokens
    assert f"You today (UTC): {now.user_day_tokens} tokens" in items[-1]["text"]
    assert f"Budgets: {limit:,} tokens per person per day." in items[-1]["text"]


async def test_cost_comes_from_litellms_price_list_and_a_dollar_budget_stops(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    """A priced model (gpt-4o-mini): each call's cost is counted, and a per-conversation
    dollar budget below it stops the next turn."""
    client = await make_client(
        model_server,
        CHATGATE_MODEL="openai/gpt-4o-mini",
        CHATGATE_BUDGET_CONVERSATION_USD="0.0000001",
    )
    first = await _post(client, "priced", "hello")
    conversation = first["conversation_id"]
    await _replies(client, conversation, 1)
    spent = await client.server.app[RUNTIME].store.spending(conversation, "web:local")
    assert 0 < spent.conversation_usd < 0.01
    await _post(client, "priced", "again")
    items = await _replies(client, conversation, 2)
    assert items[-1]["text"].startswith("Budget reached: this conversation budget is $0.00")
    assert len(model_server.requests) == 1
