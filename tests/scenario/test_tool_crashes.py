"""Crashes around tool calls and approvals, with the real gateway killed by SIGKILL.

After every restart the turn finishes; an idempotent tool's effect happens exactly once
(the server dedupes on the Idempotency-Key the re-run repeats); a non-idempotent tool whose
outcome is unknown is not re-run: the user is asked (Retry / Skip); and a turn waiting for
approval survives the restart and runs its tool once when approved.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer, Scripted


def tool_call(name: str, arguments: dict[str, Any]) -> Scripted:
    """A scripted answer calling one tool."""
    return Scripted(
        tool_calls=[
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
    )


@pytest.fixture
def gateway(
    database_url: str, model_server: FakeModelServer, echo: EchoServer, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A gateway whose run_command needs no approval unless a test says so."""
    config = tmp_path / "chatgate.toml"
    config.write_text(f"""
[tools.http_request]
allowed_hosts = ["{echo.entry}"]

[[policy]]
tool = "run_command"
args = {{ command = "echo ran.*" }}
decision = "allow"
""")
    process = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_CONFIG=str(config),
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **model_server.settings(),
    )
    yield process
    process.stop()


def _crash_and_restart(
    gateway: GatewayProcess, point: str, text: str, *, keep_fault: bool = False
) -> str:
    gateway.start(CHATGATE_TEST_FAULT=point)
    accepted = gateway.post("ops", text, id="m-1")
    assert gateway.wait_exit() == -9, gateway.log
    with contextlib.suppress(AssertionError):  # with the fault kept, it may die at once
        gateway.start(CHATGATE_TEST_FAULT=point if keep_fault else "")
    return str(accepted["conversation_id"])


def _wait(
    gateway: GatewayProcess, conversation_id: str, role: str, timeout: float = 30
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        items = gateway.messages(conversation_id)
        if any(item["role"] == role for item in items):
            return items
        assert time.monotonic() < deadline, f"no {role}: {items}\n{gateway.log}"
        time.sleep(0.1)


def _effects(tmp_path: Path, conversation_id: str) -> int:
    path = tmp_path / "state" / "scratch" / conversation_id / "effects.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize(
    ("point", "requests"),
    [
        ("after_model_call", 1),
        ("after_tool_intent", 1),
        # It ran and its result was not journaled: an idempotent call runs again, with the
        # same Idempotency-Key, so the server makes one effect of the two requests.
        ("after_tool_run", 2),
        ("after_reply_intent", 1),
        ("after_send", 1),
    ],
)
def test_an_idempotent_tools_effect_happens_once_whatever_the_crash(
    gateway: GatewayProcess,
    model_server: FakeModelServer,
    echo: EchoServer,
    point: str,
    requests: int,
) -> None:
    """GET through http_request, killed at each boundary: once the resumed turn is over,
    two model calls, the GET as often as the journal allows, one effect, one reply."""
    model_server.script(
        tool_call("http_request", {"method": "GET", "url": f"http://{echo.host}/status"}),
        "The API is up.",
    )
    conversation = _crash_and_restart(gateway, point, "is the API up?")
    items = gateway.wait_settled(conversation)
    assert [i["text"] for i in items if i["role"] == "assistant"] == ["The API is up."]
    assert len(echo.requests) == requests
    assert echo.effects() == 1
    assert len(model_server.requests) == 2


def test_killed_before_a_non_idempotent_call_ran_asks_then_retries_once(
    gateway: GatewayProcess, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Intent journaled, then death: unknown outcome, so the user is asked; Retry runs it."""
    model_server.script(tool_call("run_command", {"command": "echo ran >> effects.txt"}), "Done.")
    conversation = _crash_and_restart(gateway, "after_tool_intent", "do it")
    items = _wait(gateway, conversation, "approval")
    approval = next(i for i in items if i["role"] == "approval")["approval"]
    assert approval["kind"] == "recovery"
    assert _effects(tmp_path, conversation) == 0
    status, body = http(
        "POST", f"{gateway.url}/api/approvals/{approval['id']}", {"decision": "approve"}
    )
    assert status == 200, body
    items = gateway.wait_settled(conversation)
    assert [i["text"] for i in items if i["role"] == "assistant"] == ["Done."]
    assert _effects(tmp_path, conversation) == 1
    assert len(model_server.requests) == 2


def test_killed_after_a_non_idempotent_call_ran_does_not_run_it_again(
    gateway: GatewayProcess, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Effect done, result not journaled, then death: not re-run; the user is asked and
    chooses Skip; the model is told; the effect stays at one."""
    model_server.script(
        tool_call("run_command", {"command": "echo ran >> effects.txt"}), "I did not repeat it."
    )
    conversation = _crash_and_restart(gateway, "after_tool_run", "do it once")
    items = _wait(gateway, conversation, "approval")
    approval = next(i for i in items if i["role"] == "approval")["approval"]
    assert approval["kind"] == "recovery"
    assert _effects(tmp_path, conversation) == 1
    status, _ = http("POST", f"{gateway.url}/api/approvals/{approval['id']}", {"decision": "deny"})
    assert status == 200
    items = gateway.wait_settled(conversation)
    assert [i["text"] for i in items if i["role"] == "assistant"] == ["I did not repeat it."]
    assert _effects(tmp_path, conversation) == 1
    assert len(model_server.requests) == 2
    assert "chose to skip" in model_server.requests[-1]["messages"][-1]["content"]


@pytest.mark.parametrize("point", ["", "after_approval_prompt"])
def test_a_waiting_approval_survives_a_restart(
    gateway: GatewayProcess, model_server: FakeModelServer, tmp_path: Path, point: str
) -> None:
    """The turn waits in the database: after SIGKILL and a restart, Approve on the new
    process runs the command once and the reply arrives."""
    model_server.script(
        tool_call("run_command", {"command": "date >> effects.txt"}), "Logged the date."
    )
    gateway.start(CHATGATE_TEST_FAULT=point)
    accepted = gateway.post("ops", "log the date", id="m-1")
    conversation = str(accepted["conversation_id"])
    if point:
        assert gateway.wait_exit() == -9
    else:
        _wait(gateway, conversation, "approval")
        gateway.kill()
    gateway.start(CHATGATE_TEST_FAULT="")
    items = _wait(gateway, conversation, "approval")
    approval = next(i for i in items if i["role"] == "approval")["approval"]
    assert approval["status"] == "pending"
    time.sleep(2.5)  # past the dead process's lease: nothing may run it meanwhile
    assert _effects(tmp_path, conversation) == 0
    status, _ = http(
        "POST", f"{gateway.url}/api/approvals/{approval['id']}", {"decision": "approve"}
    )
    assert status == 200
    items = gateway.wait_settled(conversation)
    assert [i["text"] for i in items if i["role"] == "assistant"] == ["Logged the date."]
    assert _effects(tmp_path, conversation) == 1
    assert len(model_server.requests) == 2


def test_a_tool_step_that_kills_the_process_every_time_is_given_up_with_a_message(
    gateway: GatewayProcess, model_server: FakeModelServer, echo: EchoServer
) -> None:
    """The process dies at the same step of the same turn on every start: five attempts
    end there, and the sixth start tells the user instead of dying again (and goes on
    serving)."""
    model_server.script(
        tool_call("http_request", {"method": "GET", "url": f"http://{echo.host}/status"}),
        "the next message is answered",
    )
    conversation = _crash_and_restart(
        gateway, "after_tool_intent", "is the API up?", keep_fault=True
    )
    deaths = 1
    while gateway.exit_or_settled(conversation) == -9:
        deaths += 1
        assert deaths <= 6, gateway.log
        with contextlib.suppress(AssertionError):  # it may die before it is ready
            gateway.start(CHATGATE_TEST_FAULT="after_tool_intent")
    items = gateway.wait_settled(conversation)
    assert deaths == 5
    assert "failed 5 times in a row" in items[-1]["text"]
    assert echo.requests == []
    assert len(model_server.requests) == 1
    accepted = gateway.post("ops", "and now?", id="m-2")
    items = gateway.wait_settled(str(accepted["conversation_id"]))
    assert items[-1]["text"] == "the next message is answered"
