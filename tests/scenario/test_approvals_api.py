"""Tools and approvals through the web API, with the real litellm and the fake model."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.scenario.conftest import ClientFactory

Client = TestClient[Any, Any]


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> Scripted:
    """A scripted model answer that calls one tool."""
    return Scripted(
        tool_calls=[
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
    )


async def _post(client: Client, text: str, conversation: str = "ops") -> dict[str, Any]:
    response = await client.post("/api/messages", json={"conversation": conversation, "text": text})
    assert response.status == 202, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def _items(client: Client, conversation_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/api/conversations/{conversation_id}/messages")
    return list((await response.json())["items"])


async def _until(
    client: Client, conversation_id: str, role: str, count: int = 1, timeout: float = 20
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        items = await _items(client, conversation_id)
        if sum(item["role"] == role for item in items) >= count:
            return items
        assert time.monotonic() < deadline, f"no {role} item: {items}"
        await asyncio.sleep(0.05)


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "chatgate.toml"
    path.write_text(text)
    return str(path)


async def test_approve_runs_the_command_once_and_the_reply_arrives(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """run_command asks; Approve runs it; its output goes to the model; the reply arrives.
    A second press gets 409, a stranger's press 403, and neither changes anything."""
    model_server.script(
        tool_call("run_command", {"command": "echo hello from the sandbox"}),
        "The command printed a greeting.",
    )
    client = await make_client(model_server, CHATGATE_STATE_DIR=str(tmp_path / "state"))
    accepted = await _post(client, "say hello in a shell")
    items = await _until(client, accepted["conversation_id"], "approval")
    approval = next(i for i in items if i["role"] == "approval")["approval"]
    assert (approval["tool"], approval["arguments"], approval["status"]) == (
        "run_command",
        {"command": "echo hello from the sandbox"},
        "pending",
    )

    stranger = await client.post(
        f"/api/approvals/{approval['id']}", json={"decision": "approve", "user": "mallory"}
    )
    assert stranger.status == 403
    bad = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "maybe"})
    assert bad.status == 400
    assert (
        await client.post("/api/approvals/ap_000000000000", json={"decision": "approve"})
    ).status == 404

    press = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
    assert press.status == 200
    assert (await press.json())["status"] == "approved"
    again = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "deny"})
    assert again.status == 409
    assert (await again.json())["approval"]["decided_by"] == "web:local"

    items = await _until(client, accepted["conversation_id"], "assistant")
    assert items[-1]["text"] == "The command printed a greeting."
    tool_message = model_server.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert "exit code 0\nhello from the sandbox" in tool_message["content"]
    decided = next(i for i in items if i["role"] == "approval")["approval"]
    assert (decided["status"], decided["decided_by"]) == ("approved", "web:local")
    assert any(
        i["role"] == "system" and "web:local approved run_command" in i["text"] for i in items
    )
    metrics = await (await client.get("/metrics")).text()
    assert 'chatgate_approvals_total{outcome="requested"} 1.0' in metrics
    assert 'chatgate_approvals_total{outcome="approved"} 1.0' in metrics
    assert 'chatgate_approval_wait_seconds_count{outcome="approved"} 1.0' in metrics
    assert 'chatgate_tool_calls_total{status="ok",tool="run_command"} 1.0' in metrics
    assert 'chatgate_tool_duration_seconds_count{tool="run_command"} 1.0' in metrics


async def test_deny_by_text_command_tells_the_model(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """'/deny ID' typed in the chat decides; the model reads a denial, not an error."""
    model_server.script(tool_call("run_command", {"command": "rm -rf ./x"}), "Understood.")
    client = await make_client(model_server, CHATGATE_STATE_DIR=str(tmp_path / "state"))
    accepted = await _post(client, "clean up")
    items = await _until(client, accepted["conversation_id"], "approval")
    approval_id = next(i for i in items if i["role"] == "approval")["approval"]["id"]
    await _post(client, f"/deny {approval_id}")
    items = await _until(client, accepted["conversation_id"], "assistant")
    assert items[-1]["text"] == "Understood."
    assert "permission denied" in model_server.requests[1]["messages"][-1]["content"]
    assert len(model_server.requests) == 2  # the command itself never reached the model
    await _post(client, f"/approve {approval_id}")
    notes = await _until(client, accepted["conversation_id"], "system", count=2)
    assert notes[-1]["text"] == f"{approval_id} was already decided."


async def test_an_expired_approval_tells_the_model_and_the_user(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Nobody decides within CHATGATE_APPROVAL_MINUTES: the sweeper expires it and the
    turn resumes with a denial; the prompt shows it expired."""
    model_server.script(tool_call("run_command", {"command": "date"}), "Nobody approved it.")
    client = await make_client(
        model_server, CHATGATE_APPROVAL_MINUTES="0.01", CHATGATE_STATE_DIR=str(tmp_path / "state")
    )
    accepted = await _post(client, "what time is it")
    items = await _until(client, accepted["conversation_id"], "assistant", timeout=30)
    assert items[-1]["text"] == "Nobody approved it."
    approval = next(i for i in items if i["role"] == "approval")["approval"]
    assert approval["status"] == "expired"
    assert "expired" in model_server.requests[1]["messages"][-1]["content"]
    assert any(i["role"] == "system" and "expired" in i["text"] for i in items)


async def test_a_canary_secret_never_reaches_the_model(
    make_client: ClientFactory,
    model_server: FakeModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """http_request injects {{secret:GITHUB}}; the server gets the value; no request to the
    model, in any message, ever contains it."""
    canary = "ghp_CANARY_7c1e0f5d"
    monkeypatch.setenv("CHATGATE_TEST_GITHUB_TOKEN", canary)
    with EchoServer() as echo:
        config = _config(
            tmp_path,
            f"""
[tools.http_request]
allowed_hosts = ["{echo.entry}"]

[secrets]
GITHUB = "CHATGATE_TEST_GITHUB_TOKEN"

# A request carrying a secret asks by default; this one is allowed outright.
[[policy]]
tool = "http_request"
decision = "allow"
""",
        )
        model_server.script(
            tool_call(
                "http_request",
                {
                    "method": "GET",
                    "url": f"http://{echo.host}/user",
                    "headers": {"Authorization": "token {{secret:GITHUB}}"},
                },
            ),
            "Your token works.",
        )
        client = await make_client(model_server, CHATGATE_CONFIG=config)
        accepted = await _post(client, "check my github token")
        items = await _until(client, accepted["conversation_id"], "assistant")
    assert items[-1]["text"] == "Your token works."
    assert echo.requests[0][2]["authorization"] == f"token {canary}"
    sent_to_model = json.dumps(model_server.requests)
    assert canary not in sent_to_model
    assert "[secret:GITHUB]" in sent_to_model
    assert canary not in json.dumps(items)


async def test_two_simultaneous_presses_run_the_tool_once(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Approve and Deny pressed at the same moment: one 200, one 409, one outcome."""
    state = tmp_path / "state"
    model_server.script(
        tool_call("run_command", {"command": "echo once >> effects.txt"}), "Finished."
    )
    client = await make_client(model_server, CHATGATE_STATE_DIR=str(state))
    accepted = await _post(client, "append a line")
    items = await _until(client, accepted["conversation_id"], "approval")
    approval_id = next(i for i in items if i["role"] == "approval")["approval"]["id"]
    stranger = await client.post(
        f"/api/approvals/{approval_id}", json={"decision": "deny", "user": "mallory"}
    )
    assert stranger.status == 403
    items = await _items(client, accepted["conversation_id"])
    assert next(i for i in items if i["role"] == "approval")["approval"]["status"] == "pending"
    presses = await asyncio.gather(
        *(
            client.post(f"/api/approvals/{approval_id}", json={"decision": decision})
            for decision in ("approve", "approve", "deny")
        )
    )
    assert sorted(p.status for p in presses) == [200, 409, 409]
    await _until(client, accepted["conversation_id"], "assistant")
    effects = state / "scratch" / accepted["conversation_id"] / "effects.txt"
    (winner,) = [await p.json() for p in presses if p.status == 200]
    expected = 1 if winner["status"] == "approved" else 0
    assert (len(effects.read_text().splitlines()) if effects.exists() else 0) == expected


async def test_with_self_approve_off_no_web_user_approves_a_web_request(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """``self_approve = false``: the web chat names its users as each request says, so for
    this rule they are one person: neither the requester nor another web name (an admin's
    included) may decide; 403 says why, and nothing runs."""
    model_server.script(
        tool_call("run_command", {"command": "echo ran >> runs; cat runs"}), "Ran it."
    )
    config = _config(
        tmp_path, '[[policy]]\ntool = "run_command"\ndecision = "ask"\nself_approve = false\n'
    )
    client = await make_client(
        model_server,
        CHATGATE_CONFIG=config,
        CHATGATE_ADMINS="web:boss",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
    )
    accepted = await _post(client, "run it")
    items = await _until(client, accepted["conversation_id"], "approval")
    approval = next(i for i in items if i["role"] == "approval")["approval"]
    for user in ("local", "boss", "bob"):
        press = await client.post(
            f"/api/approvals/{approval['id']}", json={"decision": "approve", "user": user}
        )
        assert press.status == 403, user
        assert "policy needs someone else to approve it" in (await press.json())["error"]
    await asyncio.sleep(0.5)
    assert len(model_server.requests) == 1
