"""``/stop`` through the gateway (the web API; the real litellm against the fake model): a
turn the model is slow on ends at once, saying who stopped it; a turn waiting for an
approval has the approval cancelled (a press after it is too late) and ends the same way;
with nothing running, the person is told so."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from tests.fakes.model_server import FakeModelServer, Scripted
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_approvals_api import _items, _post, _until, tool_call


async def test_stop_ends_a_slow_turn_at_once_and_says_who_stopped_it(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    gate = threading.Event()
    model_server.script(Scripted(text="far too late", gate=gate), "a fresh answer")
    client = await make_client(model_server)
    try:
        accepted = await _post(client, "think about it for a long time")
        while not model_server.requests:  # the gateway runs on this loop: no blocking wait
            await asyncio.sleep(0.02)
        await _post(client, "/stop")
        items = await _until(client, accepted["conversation_id"], "system")
        assert [(i["role"], i["text"]) for i in items] == [
            ("user", "think about it for a long time"),
            ("user", "/stop"),
            ("system", "Stopped by web:local."),
        ]
        gate.set()
        await _post(client, "and now?")
        items = await _until(client, accepted["conversation_id"], "assistant")
        assert items[-1]["text"] == "a fresh answer"
        await _post(client, "/stop")
        items = await _until(client, accepted["conversation_id"], "system", count=2)
        assert items[-1]["text"] == "Nothing is running here to stop."
        assert len(model_server.requests) == 2
    finally:
        gate.set()


async def test_stop_during_an_approval_cancels_it_and_says_so(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    model_server.script(tool_call("run_command", {"command": "echo never"}), "never asked")
    client = await make_client(model_server, CHATGATE_STATE_DIR=str(tmp_path / "state"))
    accepted = await _post(client, "run something")
    items = await _until(client, accepted["conversation_id"], "approval")
    approval = next(i for i in items if i["role"] == "approval")["approval"]
    await _post(client, "/stop")
    await _until(client, accepted["conversation_id"], "system", count=2)
    items = await _items(client, accepted["conversation_id"])
    texts = [i["text"] for i in items if i["role"] == "system"]
    assert texts == [
        "The approval for run_command was cancelled: web:local stopped the turn.",
        "Stopped by web:local.",
    ]
    decided = next(i for i in items if i["role"] == "approval")["approval"]
    assert (decided["status"], decided["decided_by"]) == ("cancelled", "web:local")
    press = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
    assert press.status == 409
    assert len(model_server.requests) == 1  # the model never heard of it again
