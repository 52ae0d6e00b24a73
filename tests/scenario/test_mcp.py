"""MCP tools through the real wiring: a small stdio server built on the ``mcp`` SDK is
started from ``[mcp.servers.weather]``; its tool is offered as ``weather__forecast``, asks
for approval like any tool without a policy, runs once when approved, and its result
reaches the model."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gateway import ROOT, GatewayProcess, free_port, http
from tests.fakes.model_server import FakeModelServer
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_approvals_api import _post, _until
from tests.scenario.test_tool_crashes import tool_call
from tests.scenario.test_web_api import _replies

# About the MCP, not the storage: the SQLite pass runs it (tests/conftest.py).
pytestmark = pytest.mark.any_database


def _config(tmp_path: Path, calls: Path, more: str = "") -> Path:
    """chatgate.toml with the weather server (it logs each call to ``calls``), and more."""
    config = tmp_path / "chatgate.toml"
    config.write_text(
        "[mcp.servers.weather]\n"
        f"command = {str(sys.executable)!r}\n"
        'args = ["-m", "tests.fakes.mcp_weather"]\n'
        f"env = {{ PYTHONPATH = {str(ROOT)!r}, CALLS_FILE = {str(calls)!r} }}\n" + more
    )
    return config


async def test_an_mcp_tool_runs_once_after_approval_and_its_result_reaches_the_model(
    make_client: ClientFactory,
    model_server: FakeModelServer,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    calls = tmp_path / "calls.txt"
    config = _config(tmp_path, calls)
    model_server.script(
        tool_call("weather__forecast", {"city": "Oslo", "days": 2}), "Sunny in Oslo."
    )
    client = await make_client(model_server, CHATGATE_CONFIG=str(config))
    accepted = await _post(client, "what is the weather in Oslo?")
    items = await _until(client, accepted["conversation_id"], "approval")
    approval = next(i for i in items if i["role"] == "approval")["approval"]
    assert (approval["tool"], approval["arguments"]) == (
        "weather__forecast",
        {"city": "Oslo", "days": 2},
    )
    offered = [t["function"]["name"] for t in model_server.requests[0]["tools"]]
    assert "weather__forecast" in offered
    assert not calls.exists()  # nothing ran before the decision
    press = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
    assert press.status == 200
    items = await _replies(client, accepted["conversation_id"], 3)  # prompt, decision, answer
    assert items[-1]["text"] == "Sunny in Oslo."
    result = model_server.requests[1]["messages"][-1]
    assert result["role"] == "tool"
    assert result["content"] == "Oslo: sunny, 21 C, for 2 day(s)"
    assert calls.read_text() == "Oslo\n"
    # The server's own stderr lands in chatgate's log, naming the server.
    captured = capfd.readouterr()
    logged = captured.out + captured.err
    line = next(x for x in logged.splitlines() if "weather server ready on stdio" in x)
    assert "mcp server stderr" in line
    assert "server=weather" in line


async def test_bad_arguments_are_told_to_the_model_and_a_missing_server_is_left_out(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.txt"
    config = _config(
        tmp_path,
        calls,
        "[mcp.servers.gone]\n"
        'command = "/nonexistent/mcp-server"\n'
        "timeout = 5\n"
        "\n[[policy]]\n"
        'tool = "weather__forecast"\n'
        'decision = "allow"\n',
    )
    model_server.script(tool_call("weather__forecast", {"town": "Oslo"}), "I got it wrong.")
    client = await make_client(model_server, CHATGATE_CONFIG=str(config))
    accepted = await _post(client, "weather?")
    await _replies(client, accepted["conversation_id"], 1)
    result = model_server.requests[1]["messages"][-1]
    assert result["role"] == "tool"
    assert "city" in result["content"]  # the schema's complaint, for the model to fix
    assert not calls.exists()
    offered = [t["function"]["name"] for t in model_server.requests[0]["tools"]]
    assert not [name for name in offered if name.startswith("gone__")]


@pytest.fixture
def http_weather(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The weather server over streamable HTTP: (its port, the file it logs calls to)."""
    calls = tmp_path / "calls.txt"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CALLS_FILE": str(calls)}
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_weather"],
        env={**env, "MCP_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.1)
        yield port, calls
    finally:
        server.terminate()
        server.wait(10)


async def test_a_streamable_http_server_works_the_same(
    make_client: ClientFactory,
    model_server: FakeModelServer,
    tmp_path: Path,
    http_weather: tuple[int, Path],
) -> None:
    """``url =`` instead of ``command =``: the same tool over streamable HTTP."""
    port, calls = http_weather
    config = tmp_path / "chatgate.toml"
    config.write_text(
        f'[mcp.servers.weather]\nurl = "http://127.0.0.1:{port}/mcp"\n\n'
        '[[policy]]\ntool = "weather__forecast"\ndecision = "allow"\n'
    )
    model_server.script(tool_call("weather__forecast", {"city": "Bergen"}), "Rainy.")
    client = await make_client(model_server, CHATGATE_CONFIG=str(config))
    accepted = await _post(client, "weather in Bergen?")
    await _replies(client, accepted["conversation_id"], 1)
    result = model_server.requests[1]["messages"][-1]
    assert result["content"] == "Bergen: sunny, 21 C, for 1 day(s)"
    assert calls.read_text() == "Bergen\n"


def test_killed_in_the_middle_of_an_mcp_call_asks_before_running_it_again(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """SIGKILL while the MCP server works on a call (it started; its outcome is unknown):
    after the restart the call is not made again by itself; the user is asked, chooses
    Skip, and the model is told; the server saw the call once."""
    calls = tmp_path / "calls.txt"
    config = _config(
        tmp_path, calls, '\n[[policy]]\ntool = "weather__forecast"\ndecision = "allow"\n'
    )
    model_server.script(
        tool_call("weather__forecast", {"city": "Slowtown"}), "I did not ask again."
    )
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_CONFIG=str(config),
        **model_server.settings(),
    )
    try:
        gateway.start()
        accepted = gateway.post("desk", "weather in Slowtown?", id="m-1")
        conversation = str(accepted["conversation_id"])
        deadline = time.monotonic() + 30
        while not (calls.exists() and calls.read_text() == "Slowtown\n"):
            assert time.monotonic() < deadline, gateway.log
            time.sleep(0.05)
        gateway.kill()
        gateway.start()
        deadline = time.monotonic() + 30
        while not any(i["role"] == "approval" for i in gateway.messages(conversation)):
            assert time.monotonic() < deadline, gateway.log
            time.sleep(0.1)
        approval = next(i for i in gateway.messages(conversation) if i["role"] == "approval")[
            "approval"
        ]
        assert approval["kind"] == "recovery"
        status, _ = http(
            "POST", f"{gateway.url}/api/approvals/{approval['id']}", {"decision": "deny"}
        )
        assert status == 200
        items = gateway.wait_settled(conversation)
        assert [i["text"] for i in items if i["role"] == "assistant"] == ["I did not ask again."]
        assert calls.read_text() == "Slowtown\n"
        assert len(model_server.requests) == 2
        assert "chose to skip" in model_server.requests[-1]["messages"][-1]["content"]
    finally:
        gateway.stop()
