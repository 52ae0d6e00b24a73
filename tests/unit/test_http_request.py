"""http_request: allowed hosts only, secrets injected by name and never shown back."""

from __future__ import annotations

import httpx
import pytest

from agent_core.events import ConversationKey
from agent_core.secrets import Secrets
from agent_core.tools.base import Tool, ToolContext, TurnContext
from agent_core.tools.http_request import host_allowed, http_request_factory

TURN = TurnContext(
    turn_id=3,
    conversation_id="c",
    conversation=ConversationKey(platform="web", workspace="local", channel="x"),
    user="web:local",
)
CONTEXT = ToolContext(turn=TURN, call_id="call", idempotency_key="3:4")
CANARY = "ghp_canary_5f2e9a"


def _tool(seen: list[httpx.Request]) -> Tool:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        echoed = f"auth was {request.headers.get('authorization')}; body {request.content!r}"
        return httpx.Response(200, text=echoed, headers={"content-type": "text/plain"})

    (tool,) = http_request_factory(
        allowed_hosts=["api.github.com", "127.0.0.1:9000"],
        secrets=Secrets({"GITHUB": CANARY}),
        timeout=5,
        output_limit=2000,
        transport=httpx.MockTransport(handler),
    )(TURN)
    return tool


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://api.github.com/repos", True),
        ("https://API.GITHUB.COM:443/x", True),
        ("http://127.0.0.1:9000/x", True),
        ("http://127.0.0.1:9001/x", False),
        ("https://api.github.com.evil.example/", False),
        ("https://evil.example/?api.github.com", False),
        ("file:///etc/passwd", False),
        ("ftp://api.github.com/", False),
    ],
)
def test_only_listed_hosts_are_allowed(url: str, allowed: bool) -> None:
    """Host and port must match an entry exactly; other schemes never pass."""
    assert host_allowed(url, ["api.github.com", "127.0.0.1:9000"]) is allowed


async def test_a_secret_is_injected_and_scrubbed_from_the_result() -> None:
    """{{secret:GITHUB}} reaches the server; the echo back to the model shows the name only."""
    seen: list[httpx.Request] = []
    tool = _tool(seen)
    arguments = tool.validate(
        {
            "method": "POST",
            "url": "https://api.github.com/issues",
            "headers": {"Authorization": "token {{secret:GITHUB}}"},
            "body": '{"note": "{{secret:GITHUB}}"}',
        }
    )
    outcome = await tool.run(arguments, CONTEXT)
    assert seen[0].headers["authorization"] == f"token {CANARY}"
    assert seen[0].headers["idempotency-key"] == "3:4"
    assert outcome.status == "ok"
    assert outcome.output.startswith("HTTP 200 OK\ncontent-type: text/plain")
    assert CANARY not in outcome.output
    assert "[secret:GITHUB]" in outcome.output


async def test_a_disallowed_host_is_refused_without_a_request() -> None:
    """Nothing is sent to a host that is not listed, and the error names the allowed ones."""
    seen: list[httpx.Request] = []
    tool = _tool(seen)
    outcome = await tool.run(
        tool.validate({"method": "GET", "url": "https://evil.example/{{secret:GITHUB}}"}), CONTEXT
    )
    assert outcome.status == "error"
    assert "host not allowed" in outcome.output
    assert CANARY not in outcome.output
    assert seen == []


async def test_an_unknown_secret_name_is_an_error_for_the_model() -> None:
    """A made-up secret name is reported with the configured names."""
    seen: list[httpx.Request] = []
    tool = _tool(seen)
    outcome = await tool.run(
        tool.validate({"method": "GET", "url": "https://api.github.com/{{secret:AWS}}"}), CONTEXT
    )
    assert outcome.status == "error"
    assert "unknown secret 'AWS' (configured: GITHUB)" in outcome.output
    assert seen == []


def test_only_get_and_head_are_idempotent() -> None:
    """A re-run after a crash is safe for reads only."""
    tool = _tool([])
    assert tool.is_idempotent({"method": "GET"}) is True
    assert tool.is_idempotent({"method": "POST"}) is False
