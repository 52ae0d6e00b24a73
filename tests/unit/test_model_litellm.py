"""The litellm model port: what it learns at warm-up, off the event loop, and its two ways
to a single model (litellm's provider config over the aiohttp client the processes hand
in, and ``acompletion``), which must send and return the same."""

from __future__ import annotations

import importlib
import itertools
import math
import re
import socket
from typing import Any

import pytest

from agent_core import model_litellm
from agent_core.errors import ModelError
from agent_core.model import ChatMessage, HttpAnswer, ModelReply, ToolCallRequest
from agent_core.model_litellm import LiteLLMModel
from tests.fakes.model_server import FakeModelServer, Scripted
from workers.http_poster import AiohttpPoster


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


@pytest.fixture(params=["wire", "acompletion"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test of a call runs both ways: the OpenAI wire with litellm's provider config,
    and ``litellm.acompletion`` (what every other provider takes)."""
    if request.param == "acompletion":
        monkeypatch.setattr(model_litellm._Wire, "serves", staticmethod(lambda *_: False))
    return str(request.param)


async def _built(way: str, *, timeout: float = 120.0, **kwargs: object) -> LiteLLMModel:
    http = AiohttpPoster(timeout=timeout)
    model = LiteLLMModel("openai/gpt-4o-mini", http=http, timeout=timeout, **kwargs)  # type: ignore[arg-type]
    await model.warm_up()
    assert isinstance(model._router, model_litellm._Wire) == (way == "wire")
    return model


async def test_a_call_returns_litellm_s_usage_and_cost_and_retries_a_server_error(
    model_server: FakeModelServer, way: str
) -> None:
    """Through the real litellm (its logging skipped): the server's token counts, litellm's
    price for them, a 500 retried, a 400 not (a ModelError)."""
    model = await _built(way, api_base=model_server.base_url, api_key="sk-test", retries=2)
    model_server.script("first answer", Scripted(status=500), "after a retry", Scripted(status=400))
    prompt = [ChatMessage(role="user", content="how much does this cost?")]
    try:
        reply = await model.complete(prompt, max_tokens=64)
        assert reply.text == "first answer"
        usage = _served_usage(model_server.requests[-1], "first answer")
        assert (reply.prompt_tokens, reply.completion_tokens) == usage
        price = importlib.import_module("litellm").model_cost["gpt-4o-mini"]
        expected = (
            usage[0] * price["input_cost_per_token"] + usage[1] * price["output_cost_per_token"]
        )
        assert reply.cost_usd > 0
        assert math.isclose(reply.cost_usd, expected, rel_tol=1e-9)
        retried = await model.complete(prompt, max_tokens=64)
        assert retried.text == "after a retry"
        assert len(model_server.requests) == 3
        with pytest.raises(ModelError, match="BadRequestError"):
            await model.complete(prompt, max_tokens=64)
        assert len(model_server.requests) == 4
    finally:
        await model.aclose()


async def test_both_ways_send_the_same_request_and_read_the_same_reply(
    model_server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation with a tool round trip: the body the server gets, the reply chatgate
    reads (text, tool calls, tokens, cost) and the error it reports do not depend on the
    way."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look a word up.",
                "parameters": {
                    "type": "object",
                    "properties": {"word": {"type": "string"}},
                    "required": ["word"],
                },
            },
        }
    ]
    history = [
        ChatMessage(role="system", content="You are terse."),
        ChatMessage(role="user", content="what is a gateway?"),
        ChatMessage(
            role="assistant",
            content="",
            tool_calls=(ToolCallRequest(id="call_1", name="lookup", arguments='{"word": "x"}'),),
        ),
        ChatMessage(role="tool", content="a way in", tool_call_id="call_1"),
    ]
    asked = {"id": "call_2", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    replies: dict[str, list[ModelReply]] = {}
    bodies: dict[str, list[dict[str, object]]] = {}
    errors: dict[str, str] = {}
    for way in ("wire", "acompletion"):
        with monkeypatch.context() as patch:
            if way == "acompletion":
                patch.setattr(model_litellm._Wire, "serves", staticmethod(lambda *_: False))
            model = await _built(way, api_base=model_server.base_url, api_key="sk-test")
        model_server.script(Scripted(tool_calls=[asked]), "a way in, then", Scripted(status=404))
        first = len(model_server.requests)
        try:
            replies[way] = [await model.complete(history, max_tokens=99, tools=tools)]
            replies[way].append(await model.complete(history, max_tokens=99))
            with pytest.raises(ModelError) as raised:
                await model.complete(history, max_tokens=99)
            # acompletion's exceptions end with "LiteLLM Retried: N times", N the retries
            # allowed, even for a 404 it did not retry (the wire's do not say it).
            errors[way] = re.sub(r" LiteLLM Retried: \d+ times$", "", str(raised.value))
        finally:
            await model.aclose()
        bodies[way] = model_server.requests[first:]
    assert bodies["wire"] == bodies["acompletion"]
    assert bodies["wire"][0]["tools"] == tools
    assert bodies["wire"][0]["max_tokens"] == 99
    assert replies["wire"] == replies["acompletion"]
    assert errors["wire"] == errors["acompletion"]
    assert "NotFoundError" in errors["wire"]
    assert "scripted 404" in errors["wire"]
    called = replies["wire"][0].tool_calls
    assert called == (ToolCallRequest(id="call_2", name="lookup", arguments="{}"),)
    assert replies["wire"][1].text == "a way in, then"
    assert replies["wire"][1].cost_usd > 0


async def test_a_server_that_does_not_answer_in_time_is_tried_again_then_an_error(
    model_server: FakeModelServer, way: str
) -> None:
    model = await _built(
        way, api_base=model_server.base_url, api_key="sk-test", timeout=0.5, retries=1
    )
    model_server.script(Scripted(text="late", delay=2.0), Scripted(text="late", delay=2.0))
    try:
        with pytest.raises(ModelError, match="gpt-4o-mini"):
            await model.complete([ChatMessage(role="user", content="hi")], max_tokens=8)
    finally:
        await model.aclose()
    assert len(model_server.requests) == 2


async def test_a_server_that_refuses_the_connection_is_an_error_after_the_retries(
    way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as spare:  # a port nobody listens on
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    tries = 0
    post = AiohttpPoster.post

    async def counted(self: AiohttpPoster, *args: Any, **kwargs: Any) -> HttpAnswer:
        nonlocal tries
        tries += 1
        return await post(self, *args, **kwargs)

    monkeypatch.setattr(AiohttpPoster, "post", counted)
    monkeypatch.setattr("litellm.utils.calculate_retry_after", lambda *_args: 0.01)
    model = await _built(way, api_base=f"http://127.0.0.1:{port}/v1", api_key="sk", retries=2)
    try:
        with pytest.raises(ModelError, match="gpt-4o-mini"):
            await model.complete([ChatMessage(role="user", content="hi")], max_tokens=8)
    finally:
        await model.aclose()
    assert tries == (3 if way == "wire" else 0)


async def test_without_an_http_client_every_model_goes_through_acompletion() -> None:
    model = LiteLLMModel("openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1")
    await model.warm_up()
    assert isinstance(model._router, model_litellm._Direct)
    await model.aclose()


def _served_usage(body: dict[str, object], text: str) -> tuple[int, int]:
    messages = body["messages"]
    assert isinstance(messages, list)
    return sum(len(str(m.get("content", ""))) // 4 + 1 for m in messages), len(text) // 4 + 1


async def test_a_streamed_call_tells_the_text_as_it_grows_and_returns_what_an_unstreamed_one_does(
    model_server: FakeModelServer, way: str
) -> None:
    """Streamed through the real litellm, each way: the body asks for a stream with its
    usage, ``on_text`` hears every longer prefix of the answer, and the reply (text, tool
    calls, tokens, cost) is the one the same answer gives unstreamed."""
    model = await _built(way, api_base=model_server.base_url, api_key="sk-test")
    answer = "A gateway is a way in: it takes messages from chats and hands them on."
    asked = {"id": "call_9", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    model_server.script(answer, answer, Scripted(text="checking", tool_calls=[asked]))
    prompt = [ChatMessage(role="user", content="what is a gateway?")]
    heard: list[str] = []
    try:
        plain = await model.complete(prompt, max_tokens=64)
        streamed = await model.complete(prompt, max_tokens=64, on_text=heard.append)
        calling = await model.complete(prompt, max_tokens=64, on_text=lambda _text: None)
    finally:
        await model.aclose()
    assert model_server.requests[1]["stream"] is True
    assert model_server.requests[1]["stream_options"] == {"include_usage": True}
    assert "stream" not in model_server.requests[0]
    assert streamed == plain
    assert len(heard) == len(answer) // 8 + 1
    assert heard[-1] == answer
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(heard))
    assert calling.text == "checking"
    assert calling.tool_calls == (ToolCallRequest(id="call_9", name="look", arguments="{}"),)


async def test_a_stream_without_usage_is_counted_and_one_cut_off_is_tried_again(
    model_server: FakeModelServer, way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that ignores ``include_usage`` gets litellm's own token count; a stream that
    breaks off before its end is tried again, and the text starts over."""
    monkeypatch.setattr("litellm.utils.calculate_retry_after", lambda *_args: 0.01)
    model = await _built(way, api_base=model_server.base_url, api_key="sk-test", retries=1)
    model_server.script(
        Scripted(text="counted by litellm", stream_usage=False),
        Scripted(text="the first try breaks off here", cut_after=3),
        "the second try",
    )
    prompt = [ChatMessage(role="user", content="count this")]
    heard: list[str] = []
    try:
        counted = await model.complete(prompt, max_tokens=16, on_text=lambda _text: None)
        retried = await model.complete(prompt, max_tokens=16, on_text=heard.append)
    finally:
        await model.aclose()
    litellm = importlib.import_module("litellm")
    assert counted.completion_tokens == litellm.token_counter(
        model="gpt-4o-mini", text="counted by litellm"
    )
    assert counted.prompt_tokens > 0
    assert retried.text == "the second try"
    assert len(model_server.requests) == 3
    assert "the first try br" in heard  # two chunks of it were heard before the cut
    assert heard[-1] == "the second try"
