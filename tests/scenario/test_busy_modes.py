"""What a message sent while the agent works does (``CHATGATE_BUSY_MODE`` and ``/busy``),
through the gateway's web API with the real litellm against the fake model: ``steer`` joins
the running turn before its next model call, ``interrupt`` stops it and answers both
messages in one turn, ``collect`` answers messages sent close together as one turn. Also
with two gateways on one database, the message arriving at the one that does not run the
turn."""

from __future__ import annotations

import asyncio
import functools
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.journal import wait_all_settled
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.scenario.conftest import ClientFactory
from tests.scenario.test_approvals_api import _items, _post, _until, tool_call


async def _requests(model_server: FakeModelServer, count: int, timeout: float = 20) -> None:
    """Wait (without blocking the loop the gateway runs on) for ``count`` model requests."""
    for _ in range(int(timeout / 0.02)):
        if len(model_server.requests) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{len(model_server.requests)} of {count} model requests")


def _users(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request["messages"] if m["role"] == "user"]


async def test_steer_adds_a_message_to_the_running_turn_before_its_next_model_call(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    gate = threading.Event()
    calling = tool_call("list_schedules", {})
    calling.gate = gate
    model_server.script(calling, "No schedules, and noted: in French.")
    client = await make_client(model_server, CHATGATE_BUSY_MODE="steer")
    try:
        accepted = await _post(client, "what is scheduled here?")
        await _requests(model_server, 1)
        await _post(client, "answer in French, please")
        gate.set()
        items = await _until(client, accepted["conversation_id"], "assistant")
    finally:
        gate.set()
    assert [(i["role"], i["text"]) for i in items] == [
        ("user", "what is scheduled here?"),
        ("user", "answer in French, please"),
        ("assistant", "No schedules, and noted: in French."),
    ]
    second = model_server.requests[1]
    assert second["messages"][-1] == {"role": "user", "content": "answer in French, please"}
    assert [m["role"] for m in second["messages"][-3:]] == ["assistant", "tool", "user"]
    await asyncio.sleep(0.5)
    assert len(model_server.requests) == 2  # the steered message had no turn of its own


async def test_interrupt_stops_the_running_turn_and_answers_both_messages_once(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    gate = threading.Event()
    model_server.script(Scripted(text="the answer to the first alone", gate=gate), "both")
    client = await make_client(model_server, CHATGATE_BUSY_MODE="interrupt")
    try:
        accepted = await _post(client, "tell me about A")
        await _requests(model_server, 1)
        await _post(client, "actually, about B")
        items = await _until(client, accepted["conversation_id"], "assistant")
    finally:
        gate.set()
    assert [(i["role"], i["text"]) for i in items] == [
        ("user", "tell me about A"),
        ("user", "actually, about B"),
        ("assistant", "both"),
    ]
    assert _users(model_server.requests[1])[-2:] == ["tell me about A", "actually, about B"]
    await asyncio.sleep(0.5)
    assert len(model_server.requests) == 2
    assert len(await _items(client, accepted["conversation_id"])) == 3  # nothing else said


async def test_collect_answers_messages_sent_close_together_as_one_turn(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    model_server.script("one answer for all three")
    client = await make_client(
        model_server, CHATGATE_BUSY_MODE="collect", CHATGATE_COLLECT_SECONDS="1"
    )
    accepted = await _post(client, "first,")
    await _post(client, "second,")
    await _post(client, "and third.")
    items = await _until(client, accepted["conversation_id"], "assistant")
    await asyncio.sleep(1.5)
    assert len(model_server.requests) == 1
    assert _users(model_server.requests[0])[-3:] == ["first,", "second,", "and third."]
    assert [i["text"] for i in items] == [
        "first,",
        "second,",
        "and third.",
        "one answer for all three",
    ]


async def test_busy_sets_the_mode_for_one_conversation(
    make_client: ClientFactory, model_server: FakeModelServer
) -> None:
    client = await make_client(model_server)
    accepted = await _post(client, "/busy")
    items = await _until(client, accepted["conversation_id"], "system")
    assert items[-1]["text"].startswith("Busy mode: queue (the default)")
    await _post(client, "/busy interrupt")
    items = await _until(client, accepted["conversation_id"], "system", count=2)
    assert items[-1]["text"].startswith("Busy mode: interrupt (set for this conversation)")
    await _post(client, "/busy sideways")
    items = await _until(client, accepted["conversation_id"], "system", count=3)
    assert items[-1]["text"].startswith("Unknown mode 'sideways'.")
    other = await _post(client, "/busy", conversation="another")
    items = await _until(client, other["conversation_id"], "system")
    assert items[-1]["text"].startswith("Busy mode: queue (the default)")

    # The conversation's own mode applies: a newer message interrupts there.
    gate = threading.Event()
    model_server.script(Scripted(text="too slow", gate=gate), "fresh")
    try:
        await _post(client, "slow question")
        await _requests(model_server, 1)
        await _post(client, "never mind, this instead")
        items = await _until(client, accepted["conversation_id"], "assistant")
    finally:
        gate.set()
    assert items[-1]["text"] == "fresh"


@pytest.mark.parametrize("mode", ["interrupt", "stop"])
async def test_a_message_at_another_gateway_reaches_the_turn_through_the_journal(
    make_client: ClientFactory, model_server: FakeModelServer, mode: str
) -> None:
    """Two gateways on one database: the turn runs on the first; the newer message
    (``interrupt``) or ``/stop`` arrives at the second, which cannot tell the first
    directly; the first finds it in the journal and stops."""
    gate = threading.Event()
    model_server.script(Scripted(text="never delivered", gate=gate), "answered at last")
    first = await make_client(model_server, CHATGATE_BUSY_MODE="interrupt")
    second = await make_client(model_server, CHATGATE_BUSY_MODE="interrupt")
    try:
        accepted = await _post(first, "a long question")
        await _requests(model_server, 1)
        await _post(second, "/stop" if mode == "stop" else "a better question")
        role = "system" if mode == "stop" else "assistant"
        items = await _until(first, accepted["conversation_id"], role, timeout=30)
    finally:
        gate.set()
    if mode == "stop":
        assert items[-1]["text"] == "Stopped by web:local."
        await asyncio.sleep(0.5)
        assert len(model_server.requests) == 1
    else:
        assert items[-1]["text"] == "answered at last"
        assert _users(model_server.requests[1])[-2:] == ["a long question", "a better question"]
        assert all(i["text"] != "never delivered" for i in items)


def test_a_steered_turn_killed_before_its_next_answer_sends_both_messages_again(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """``steer`` across a restart: the second message joins the running turn (journaled),
    the gateway is SIGKILLed while the model writes the answer to both; the restarted
    gateway resumes the turn with both messages again, answers once, and the second
    message never gets a turn of its own: exactly three model requests."""
    calling = tool_call("list_schedules", {})
    calling.delay = 2.0
    model_server.script(calling, Scripted(text="cut off", delay=30), "both, at last")
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_BUSY_MODE="steer",
        CHATGATE_LEASE_SECONDS="3",
        **model_server.settings(),
    )
    gateway.start()
    try:
        send = functools.partial(http, "POST", f"{gateway.url}/api/messages")
        status, first = send({"conversation": "steered", "text": "what is scheduled?"})
        assert status == 202
        model_server.wait_for_requests(1)
        assert send({"conversation": "steered", "text": "and in French"})[0] == 202
        model_server.wait_for_requests(2)
        assert _users(model_server.requests[1])[-2:] == ["what is scheduled?", "and in French"]
        gateway.kill()
        gateway.start()
        wait_all_settled(database_url, started=2, timeout=60)
        status, body = http(
            "GET", f"{gateway.url}/api/conversations/{first['conversation_id']}/messages"
        )
        assert status == 200
        assert [(i["role"], i["text"]) for i in body["items"]] == [
            ("user", "what is scheduled?"),
            ("user", "and in French"),
            ("assistant", "both, at last"),
        ]
        assert len(model_server.requests) == 3
        assert _users(model_server.requests[2])[-2:] == ["what is scheduled?", "and in French"]
    finally:
        gateway.stop()


async def test_steer_reads_the_files_of_the_message_it_takes_in(
    make_client: ClientFactory, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """A CSV sent while the turn works, in busy mode ``steer``: the next model call has
    the message and the file's contents after it."""
    gate = threading.Event()
    calling = tool_call("list_schedules", {})
    calling.gate = gate
    model_server.script(calling, "North sold 4242.")
    client = await make_client(
        model_server, CHATGATE_BUSY_MODE="steer", CHATGATE_STATE_DIR=str(tmp_path / "state")
    )
    try:
        accepted = await _post(client, "anything scheduled?")
        await _requests(model_server, 1)
        form = aiohttp.FormData()
        form.add_field("file", b"region,revenue\nnorth,4242\n", filename="sales.csv")
        response = await client.post("/api/uploads", data=form, headers={"X-Chatgate-Upload": "1"})
        assert response.status == 201, await response.text()
        upload = await response.json()
        body = {"conversation": "ops", "text": "and use this",
                "attachments": [{"id": upload["id"], "name": "sales.csv"}]}  # fmt: skip
        assert (await client.post("/api/messages", json=body)).status == 202
        gate.set()
        items = await _until(client, accepted["conversation_id"], "assistant")
    finally:
        gate.set()
    assert items[-1]["text"] == "North sold 4242."
    users = _users(model_server.requests[1])
    assert users[-2] == "and use this"
    assert "north,4242" in users[-1]
    assert "[Attached file: sales.csv" in users[-1]
