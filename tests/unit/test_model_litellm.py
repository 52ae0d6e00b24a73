"""The litellm model port: what it learns at warm-up, off the event loop."""

from __future__ import annotations

import importlib
import math

import pytest

from agent_core.errors import ModelError
from agent_core.model import ChatMessage
from agent_core.model_litellm import LiteLLMModel
from tests.fakes.model_server import FakeModelServer, Scripted


async def test_the_window_is_looked_up_once_at_warm_up() -> None:
    """A known model's window comes from litellm's map at warm-up; a configured one wins."""
    known = LiteLLMModel("openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1")
    assert known.context_window() == 8192  # not loaded yet: nothing is imported on the loop
    await known.warm_up()
    assert known.context_window() == 128_000
    configured = LiteLLMModel("openai/gpt-4o-mini", context_tokens=4096)
    await configured.warm_up()
    assert configured.context_window() == 4096
    unknown = LiteLLMModel("openai/some-local-model")
    await unknown.warm_up()
    assert unknown.context_window() == 8192


async def test_a_call_returns_litellm_s_usage_and_cost_and_retries_a_server_error(
    model_server: FakeModelServer,
) -> None:
    """Through the real litellm (its logging skipped): the server's token counts, litellm's
    price for them, a 500 retried, a 400 not (a ModelError)."""
    model = LiteLLMModel(
        "openai/gpt-4o-mini", api_base=model_server.base_url, api_key="sk-test", retries=2
    )
    model_server.script("first answer", Scripted(status=500), "after a retry", Scripted(status=400))
    prompt = [ChatMessage(role="user", content="how much does this cost?")]
    reply = await model.complete(prompt, max_tokens=64)
    assert reply.text == "first answer"
    usage = _served_usage(model_server.requests[-1], "first answer")
    assert (reply.prompt_tokens, reply.completion_tokens) == usage
    price = importlib.import_module("litellm").model_cost["gpt-4o-mini"]
    expected = usage[0] * price["input_cost_per_token"] + usage[1] * price["output_cost_per_token"]
    assert reply.cost_usd > 0
    assert math.isclose(reply.cost_usd, expected, rel_tol=1e-9)
    retried = await model.complete(prompt, max_tokens=64)
    assert retried.text == "after a retry"
    assert len(model_server.requests) == 3
    with pytest.raises(ModelError):
        await model.complete(prompt, max_tokens=64)
    assert len(model_server.requests) == 4


def _served_usage(body: dict[str, object], text: str) -> tuple[int, int]:
    messages = body["messages"]
    assert isinstance(messages, list)
    return sum(len(str(m.get("content", ""))) // 4 + 1 for m in messages), len(text) // 4 + 1
