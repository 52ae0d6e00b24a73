"""Discord end to end: the real discord.py in a ``chatgate gateway`` process against a fake
REST API and gateway on 127.0.0.1, the real litellm against the fake model."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_server import CHANNEL, THREAD, FakeDiscord
from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.model_server import FakeModelServer
from tests.scenario.test_forget import columns_holding
from tests.scenario.test_tool_crashes import tool_call

# About the adapters, not the storage: the SQLite pass runs it (tests/conftest.py).
pytestmark = pytest.mark.any_database

ALICE = "301234567890123456"
MALLORY = "309999999999999999"
POST = f"POST channels/{CHANNEL}/messages"


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    """The fake REST API and gateway."""
    with FakeDiscord() as server:
        yield server


@pytest.fixture
def gateway(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A gateway connected to the fake Discord, open to everyone."""
    process = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **discord.settings(),
        **model_server.settings(),
    )
    process.start()
    discord.wait_connected()
    yield process
    process.stop()


def _wait_created(discord: FakeDiscord, count: int, timeout: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(discord.created) < count:
        time.sleep(0.05)
    assert len(discord.created) >= count, discord.calls
    return discord.created


def test_a_mention_is_answered_once_as_a_reply_that_pings_nobody(
    gateway: GatewayProcess, model_server: FakeModelServer, discord: FakeDiscord
) -> None:
    """The reply answers the message, typing shows meanwhile, and neither @everyone nor a
    role mention from the model pings anyone. A replayed dispatch is one turn."""
    model_server.script("Done, @everyone and <@&777>: **all green**")
    identify = discord.identified[0]
    assert identify["intents"] & (1 << 15)  # MESSAGE_CONTENT
    discord.message_create("chatter that is not for the bot")
    message = discord.message_create("how are the deploys?", mention=True)
    discord.dispatch("MESSAGE_CREATE", message)  # a RESUME's replay
    [reply] = _wait_created(discord, 1)
    assert reply["message_reference"]["message_id"] == int(message["id"])
    assert reply["allowed_mentions"] == {"parse": []}
    assert "@\u200beveryone" in reply["content"]
    assert "<@\u200b&777>" in reply["content"]
    assert discord.called(f"POST channels/{CHANNEL}/typing")
    time.sleep(1.5)
    assert len(discord.created) == 1
    assert model_server.user_texts() == ["how are the deploys?"]


def test_a_dm_and_a_thread_the_bot_is_in_are_answered_there(
    gateway: GatewayProcess, model_server: FakeModelServer, discord: FakeDiscord
) -> None:
    model_server.script("in the dm", "in the thread")
    dm_channel = "1299999999999999999"
    discord.message_create("hello privately", channel=dm_channel, guild=None)
    assert _wait_created(discord, 1)[0]["channel_id"] == dm_channel
    discord.message_create("and in the thread?", channel=THREAD)
    assert _wait_created(discord, 2)[1]["channel_id"] == THREAD


def test_an_approval_button_works_after_a_restart_and_only_for_the_requester(
    gateway: GatewayProcess, model_server: FakeModelServer, discord: FakeDiscord
) -> None:
    model_server.script(
        tool_call("run_command", {"command": "echo from-discord"}), "The command said from-discord."
    )
    discord.message_create("run the echo", mention=True)
    [prompt] = _wait_created(discord, 1)
    [row] = prompt["components"]
    buttons = row["components"]
    assert [b["label"] for b in buttons] == ["Approve", "Allow in this conversation", "Deny"]
    approve = buttons[0]["custom_id"]
    assert approve.startswith("cg:ap:approve:ap_")
    # The gateway restarts (once the turn waits, with the prompt's receipt stored); the
    # button on the old message must still work.
    deadline = time.monotonic() + 20
    while "turn waiting for a decision" not in gateway.log and time.monotonic() < deadline:
        time.sleep(0.05)
    gateway.stop()
    gateway.start()
    discord.wait_connected(2)
    # Someone else presses: deferred, then an ephemeral refusal; nothing runs.
    discord.press(prompt, approve, presser=MALLORY)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not _followups(discord):
        time.sleep(0.05)
    [refusal] = _followups(discord)
    assert refusal["flags"] & 64  # ephemeral
    assert "may not decide" in refusal["content"]
    assert len(model_server.requests) == 1
    # The requester approves: the prompt is edited, the tool runs once, the reply follows.
    discord.press(prompt, approve, presser=ALICE)
    [edit] = discord.wait_for(f"PATCH channels/{CHANNEL}/messages/{prompt['id']}", 1)
    assert f"discord:{ALICE} approved run_command" in edit["content"]
    assert edit["components"] == []
    replies = _wait_created(discord, 2)
    assert replies[1]["content"] == "The command said from-discord."
    # The same interaction replayed (as after a RESUME): not answered or decided again.
    assert discord.last_press is not None
    discord.dispatch("INTERACTION_CREATE", discord.last_press)
    time.sleep(1)
    callbacks = [c for route, c in discord.calls if route.endswith("/callback")]
    assert [c["type"] for c in callbacks] == [6, 6]  # both deferred at once
    assert len(_followups(discord)) == 1  # only the refusal
    time.sleep(1)
    assert len(model_server.requests) == 2


def _followups(discord: FakeDiscord) -> list[dict[str, Any]]:
    return [body for route, body in discord.calls if route.startswith("POST webhooks/")]


def test_a_rate_limited_reply_is_retried_and_arrives(
    gateway: GatewayProcess, model_server: FakeModelServer, discord: FakeDiscord
) -> None:
    model_server.script("after the rate limit")
    discord.limit_channel(CHANNEL)
    discord.message_create("hi", mention=True)
    [reply] = _wait_created(discord, 1)
    assert reply["content"] == "after the rate limit"
    assert discord.called("ratelimited")


def test_a_long_reply_arrives_as_several_messages_without_broken_code(
    gateway: GatewayProcess, model_server: FakeModelServer, discord: FakeDiscord
) -> None:
    code = "\n".join(f"line_{i} = compute({i}) & check({i}) < {i * 2}" for i in range(120))
    parts = []
    for index in range(4):
        parts.append(f"Part {index}: " + "words " * 150)
        parts.append(f"```python\n{code}\n```")
    text = "\n\n".join(parts)
    assert len(text) > 10_000
    model_server.script(text)
    discord.message_create("explain", mention=True)
    _wait_created(discord, 6)
    time.sleep(1)
    contents = [m["content"] for m in discord.created]
    for content in contents:
        assert len(content) <= 2000
        assert content.count("```") % 2 == 0, content[:200]
    assert "".join(contents).count("line_119 = compute(119) & check(119) < 238") == 4


def test_one_gateway_holds_the_session_and_another_takes_over_when_it_dies(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> None:
    """Two gateways on one database: one identifies; kill it and the other connects within
    seconds and answers."""
    processes = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        process = GatewayProcess(
            database_url=database_url,
            workdir=tmp_path / name,
            CHATGATE_ACCESS="open",
            **discord.settings(),
            **model_server.settings(),
        )
        process.start()
        processes.append(process)
    first, second = processes
    try:
        discord.wait_connected()
        time.sleep(2)
        assert len(discord.identified) == 1  # the other waits
        holder = first if "holding" in first.log else second
        other = second if holder is first else first
        holder.kill()
        discord.wait_connected(2, timeout=30)
        assert "holding" in other.log
        model_server.script("from the survivor")
        discord.message_create("still there?", mention=True)
        assert _wait_created(discord, 1)[0]["content"] == "from the survivor"
    finally:
        for process in processes:
            process.kill()


def test_with_self_approve_off_the_requester_is_refused_and_an_admin_runs_it_once(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> None:
    """A policy with ``self_approve = false``: the requester's own press gets an ephemeral
    refusal and runs nothing; an admin's press runs the command once."""
    admin = "304444444444444444"
    (tmp_path / "chatgate.toml").write_text(
        '[[policy]]\ntool = "run_command"\ndecision = "ask"\nself_approve = false\n'
    )
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_ADMINS=f"discord:{admin}",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_CONFIG=str(tmp_path / "chatgate.toml"),
        **discord.settings(),
        **model_server.settings(),
    )
    model_server.script(
        tool_call("run_command", {"command": "echo ran >> runs; cat runs"}), "Ran it."
    )
    gateway.start()
    try:
        discord.wait_connected()
        discord.message_create("run it", mention=True)
        [prompt] = _wait_created(discord, 1)
        approve = prompt["components"][0]["components"][0]["custom_id"]
        discord.press(prompt, approve, presser=ALICE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _followups(discord):
            time.sleep(0.05)
        [refusal] = _followups(discord)
        assert refusal["flags"] & 64
        assert "policy needs someone else to approve it" in refusal["content"]
        time.sleep(1)
        assert len(model_server.requests) == 1
        discord.press(prompt, approve, presser=admin)
        [edit] = discord.wait_for(f"PATCH channels/{CHANNEL}/messages/{prompt['id']}", 1)
        assert f"discord:{admin} approved run_command" in edit["content"]
        assert _wait_created(discord, 2)[1]["content"] == "Ran it."
        assert model_server.requests[1]["messages"][-1]["content"] == "exit code 0\nran\n"
        time.sleep(1)
        assert len(model_server.requests) == 2
    finally:
        gateway.stop()


def test_a_gateway_connection_cut_without_a_close_frame_is_deaf_until_back(
    gateway: GatewayProcess, model_server: FakeModelServer, discord: FakeDiscord
) -> None:
    """The fake aborts the gateway connection and refuses new ones for a while: /readyz
    names Discord deaf meanwhile (the gateway still serves); discord.py reconnects once
    it may, and a message after that is answered."""
    model_server.script("back again")
    discord.refuse_gateway = True
    discord.drop()
    deadline = time.monotonic() + 30
    while http("GET", f"{gateway.url}/readyz")[1]["deaf"] != ["discord"]:
        assert time.monotonic() < deadline, gateway.log
        time.sleep(0.1)
    status, body = http("GET", f"{gateway.url}/readyz")
    assert status == 200, body
    assert body["platforms"]["discord"]["connected"] is False
    discord.refuse_gateway = False
    deadline = time.monotonic() + 60
    while http("GET", f"{gateway.url}/readyz")[1]["deaf"]:
        assert time.monotonic() < deadline, gateway.log
        time.sleep(0.1)
    discord.wait_connected(2)
    discord.message_create("still there?", mention=True)
    [reply] = _wait_created(discord, 1)
    assert reply["content"] == "back again"
    assert "discord gateway connection lost" in gateway.log


def test_forget_me_asks_with_buttons_and_only_the_asker_can_erase(
    gateway: GatewayProcess, model_server: FakeModelServer, database_url: str, discord: FakeDiscord
) -> None:
    """``forget me``: Erase / Keep buttons; someone else's press gets an ephemeral refusal
    and erases nothing; the asker's Erase erases them and the question becomes the
    receipt, its buttons gone."""
    model_server.script("Noted.")
    discord.message_create("my locker code is kumquat19", mention=True)
    _wait_created(discord, 1)
    discord.message_create("forget me", mention=True)
    question = _wait_created(discord, 2)[1]
    [row] = question["components"]
    assert [b["label"] for b in row["components"]] == ["Erase my data", "Keep it"]
    erase = row["components"][0]["custom_id"]
    assert erase.startswith("cg:ask:forget:y_")
    discord.press(question, erase, presser=MALLORY)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not _followups(discord):
        time.sleep(0.05)
    [refusal] = _followups(discord)
    assert refusal["flags"] & 64  # ephemeral
    assert "Only the person who asked" in refusal["content"]
    assert "messages.text" in columns_holding(database_url, "kumquat19")
    discord.press(question, erase, presser=ALICE)
    [edit] = discord.wait_for(f"PATCH channels/{CHANNEL}/messages/{question['id']}", 1)
    assert f"Erased discord:{ALICE}'s data" in edit["content"]
    assert edit["components"] == []
    assert columns_holding(database_url, "kumquat19") == []
