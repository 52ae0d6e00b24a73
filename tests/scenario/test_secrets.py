"""Secrets through the real gateway: a server that echoes the credential back in disguise
shows the model nothing of it, a secret in a URL's port stays out of the log file, and a
secret bound to one host is refused on another."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gateway import GatewayProcess
from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer, Scripted

pytestmark = pytest.mark.any_database

CANARY = f"tok-{uuid.uuid4().hex}"


def _call(url: str, headers: dict[str, str] | None = None) -> Scripted:
    arguments: dict[str, Any] = {"method": "GET", "url": url}
    if headers:
        arguments["headers"] = headers
    return Scripted(
        tool_calls=[
            {
                "id": f"call_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {"name": "http_request", "arguments": json.dumps(arguments)},
            }
        ]
    )


@pytest.fixture
def gateway(
    database_url: str, model_server: FakeModelServer, echo: EchoServer, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """Two secrets: ECHO bound to the echo server, ELSEWHERE bound to another host; the
    echo server may be called without asking."""
    config = tmp_path / "chatgate.toml"
    config.write_text(f"""
[tools.http_request]
allowed_hosts = ["{echo.entry}", "api.github.com"]

[secrets.ECHO]
env = "ECHO_TOKEN"
hosts = ["{echo.entry}"]

[secrets.ELSEWHERE]
env = "GITHUB_TOKEN"
hosts = ["api.github.com"]

[[policy]]
tool = "http_request"
decision = "allow"
""")
    process = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_CONFIG=str(config),
        ECHO_TOKEN=CANARY,
        GITHUB_TOKEN=f"gh-{CANARY}",
        **model_server.settings(),
    )
    process.start()
    yield process
    process.stop()


def _tool_results(model: FakeModelServer) -> list[str]:
    return [
        str(r["messages"][-1]["content"])
        for r in model.requests
        if r["messages"][-1]["role"] == "tool"
    ]


def test_the_model_never_sees_a_secret_echoed_back_in_disguise(
    gateway: GatewayProcess, model_server: FakeModelServer, echo: EchoServer
) -> None:
    model_server.script(
        _call(f"http://{echo.host}/disguise", {"X-Token": "{{secret:ECHO}}"}), "seen"
    )
    accepted = gateway.post("ops", "check the token")
    gateway.wait_for_replies(accepted["conversation_id"], 1)
    assert echo.requests[0][2]["x-token"] == CANARY  # it was sent
    [result] = _tool_results(model_server)
    assert "reversed [secret:ECHO]" in result
    for request in model_server.requests:
        assert CANARY not in json.dumps(request)
        assert CANARY[:10] not in json.dumps(request)
    assert CANARY not in gateway.log


def test_a_secret_in_a_port_stays_out_of_the_log_and_a_bound_secret_stays_home(
    gateway: GatewayProcess, model_server: FakeModelServer, echo: EchoServer
) -> None:
    model_server.script(
        _call("http://127.0.0.1:{{secret:ECHO}}/x"),
        _call(f"http://{echo.host}/", {"Authorization": "token {{secret:ELSEWHERE}}"}),
        "done",
    )
    accepted = gateway.post("ops", "try these")
    gateway.wait_for_replies(accepted["conversation_id"], 1)
    port, elsewhere = _tool_results(model_server)
    assert CANARY not in port
    assert '"status": "error"' in port
    assert "secret ELSEWHERE may not be sent to 127.0.0.1" in elsewhere
    assert echo.requests == []
    time.sleep(0.5)
    assert CANARY not in gateway.log
    for request in model_server.requests:
        assert CANARY not in json.dumps(request)
