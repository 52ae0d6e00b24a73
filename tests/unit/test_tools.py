"""Tools: schemas from type hints, argument validation told to the model, limits."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Literal

import pytest
from pydantic import Field

from agent_core.errors import ConfigError
from agent_core.events import ConversationKey
from agent_core.tools.base import (
    InvalidArguments,
    Tool,
    ToolContext,
    ToolFailed,
    TurnContext,
    compress,
)
from agent_core.tools.registry import ToolRegistry

TURN = TurnContext(
    turn_id=7,
    conversation_id="c",
    conversation=ConversationKey(platform="web", workspace="local", channel="x"),
    user="web:local",
)
CONTEXT = ToolContext(turn=TURN, call_id="call_1", idempotency_key="7:2")


async def fetch(
    context: ToolContext,
    url: Annotated[str, Field(description="where to go")],
    method: Literal["GET", "POST"] = "GET",
    retries: int = 0,
) -> str:
    """Fetch a URL.

    More text that the model does not need.
    """
    return f"{method} {url} x{retries} key={context.idempotency_key}"


def test_schema_comes_from_type_hints_and_docstring() -> None:
    """Names, types, enums, defaults and descriptions reach the model's function spec."""
    spec = Tool(fetch, idempotent=True).spec()["function"]
    assert spec["name"] == "fetch"
    assert spec["description"] == "Fetch a URL."
    parameters = spec["parameters"]
    assert parameters["required"] == ["url"]
    assert parameters["properties"]["url"] == {"type": "string", "description": "where to go"}
    assert parameters["properties"]["method"]["enum"] == ["GET", "POST"]
    assert parameters["additionalProperties"] is False


async def test_valid_arguments_run_the_function_with_the_context() -> None:
    """JSON text from the model is parsed, checked and passed with the idempotency key."""
    tool = Tool(fetch, idempotent=True)
    arguments = tool.validate('{"url": "http://x", "retries": "2"}')
    outcome = await tool.run(arguments, CONTEXT)
    assert outcome.status == "ok"
    assert outcome.output == "GET http://x x2 key=7:2"


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "JSON object"),
        ("{}", "url: Field required"),
        ('{"url": "u", "method": "DELETE"}', "method"),
        ('{"url": "u", "extra": 1}', "extra"),
    ],
)
def test_bad_arguments_say_what_is_wrong(raw: str, words: str) -> None:
    """Malformed or mistyped arguments raise InvalidArguments with a readable reason."""
    with pytest.raises(InvalidArguments, match=words):
        Tool(fetch, idempotent=True).validate(raw)


async def test_a_slow_tool_times_out() -> None:
    """A call over the tool's timeout ends with a timeout outcome, not a hang."""

    async def slow(context: ToolContext) -> str:
        """Sleep."""
        await asyncio.sleep(10)
        return "never"

    outcome = await Tool(slow, idempotent=True, timeout=0.05).run({}, CONTEXT)
    assert outcome.status == "timeout"
    assert json.loads(outcome.for_model())["status"] == "timeout"


async def test_a_failing_tool_reports_an_error_outcome() -> None:
    """ToolFailed becomes an error the model reads."""

    async def broken(context: ToolContext) -> str:
        """Fail."""
        raise ToolFailed("disk full")

    outcome = await Tool(broken, idempotent=False).run({}, CONTEXT)
    assert (outcome.status, outcome.output) == ("error", "disk full")


async def test_long_output_keeps_head_and_tail_and_states_the_size() -> None:
    """Output over the cap is compressed before it can enter the context."""

    async def chatty(context: ToolContext) -> str:
        """Talk a lot."""
        return "HEAD" + "x" * 50_000 + "TAIL"

    outcome = await Tool(chatty, idempotent=True, output_limit=300).run({}, CONTEXT)
    assert outcome.output.startswith("HEAD")
    assert outcome.output.endswith("TAIL")
    assert "of 50008" in outcome.output
    assert len(outcome.output) < 400
    assert compress("short", 300) == "short"


def test_registry_builds_tools_per_turn_and_rejects_duplicate_names() -> None:
    """Factories see the turn (who, where); two tools with one name is a config error."""

    def only_for_web(turn: TurnContext) -> list[Tool]:
        return [Tool(fetch, idempotent=True)] if turn.conversation.platform == "web" else []

    assert list(ToolRegistry([only_for_web]).tools_for(TURN)) == ["fetch"]
    with pytest.raises(ConfigError):
        ToolRegistry([only_for_web, only_for_web]).tools_for(TURN)


async def test_a_crashing_tool_becomes_an_error_result() -> None:
    """An unexpected exception in a tool is reported to the model, not raised to the turn."""

    async def buggy(context: ToolContext) -> str:
        """Divide by zero."""
        return str(1 / 0)

    outcome = await Tool(buggy, idempotent=True).run({}, CONTEXT)
    assert outcome.status == "error"
    assert "buggy failed unexpectedly: ZeroDivisionError" in outcome.output
