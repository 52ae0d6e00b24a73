"""Killed between a platform storing a message and chatgate storing its receipt: after the
restart the conversation holds that message once, on Slack (found again by its metadata)
and Discord (the nonce, enforced), for replies, long replies cut between their chunks, and
approval prompts; and a press committed just before a kill still resumes the turn once.

The real ``chatgate gateway`` runs as a subprocess against the fake platform servers; every
check waits until the journal has no open turn, then counts raw requests.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_server import CHANNEL as DISCORD_CHANNEL
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.journal import wait_all_settled
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import WEBHOOK_SECRET, FakeTelegram
from tests.scenario.test_slack import CHANNEL, _mention, _post_event, _press
from tests.scenario.test_tool_crashes import tool_call

THREAD = "1700000100.000100"
DISCORD_POST = f"POST channels/{DISCORD_CHANNEL}/messages"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    """The fake Slack Web API."""
    with FakeSlack() as server:
        yield server


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    """The fake Discord REST API and gateway."""
    with FakeDiscord() as server:
        yield server


def _gateway(tmp_path: Path, database_url: str, **settings: str) -> GatewayProcess:
    return GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **settings,
    )


@pytest.fixture
def on_slack(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A gateway (not started) with Slack configured."""
    process = _gateway(tmp_path, database_url, **slack.settings(), **model_server.settings())
    yield process
    process.stop()


@pytest.fixture
def on_discord(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A gateway (not started) connected to the fake Discord."""
    process = _gateway(tmp_path, database_url, **discord.settings(), **model_server.settings())
    yield process
    process.stop()


def _slack_crash(gateway: GatewayProcess, point: str, text: str) -> None:
    """Start with a fault, mention the bot, see the process die there, start again."""
    gateway.start(CHATGATE_TEST_FAULT=point)
    assert _post_event(gateway, _mention(text, ts=THREAD))[0] == 200
    assert gateway.wait_exit() == -9, gateway.log
    gateway.start()


def _keys(messages: list[dict[str, Any]]) -> list[str]:
    return [m["metadata"]["event_payload"]["key"] for m in messages]


def test_a_slack_reply_posted_before_its_receipt_was_stored_is_not_posted_again(
    on_slack: GatewayProcess, database_url: str, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    """Killed right after chat.postMessage: the resend finds the message by its metadata
    in the thread and records its ts; the thread holds one reply."""
    model_server.script("the only answer")
    _slack_crash(on_slack, "after_send", "hello")
    wait_all_settled(database_url)
    thread = slack.thread(CHANNEL, THREAD)
    assert [m["text"] for m in thread] == ["the only answer"]
    assert len(slack.posted()) == 1
    [lookup] = slack.called("conversations.replies")
    assert (lookup["ts"], lookup["oldest"]) == (THREAD, THREAD)
    assert len(model_server.requests) == 1


def test_a_long_slack_reply_cut_between_chunks_posts_each_chunk_once(
    on_slack: GatewayProcess, database_url: str, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    """Killed after the first of several messages: the resend posts only the rest. (The
    reply is past a screen, so its first message is a chat stream, stopped with its
    delivery key: the resend finds it like a posted one.)"""
    text = "\n\n".join(f"Part {index}: " + "words " * 600 for index in range(4))
    model_server.script(text)
    _slack_crash(on_slack, "after_chunk_sent", "explain")
    wait_all_settled(database_url)
    thread = slack.thread(CHANNEL, THREAD)
    keys = _keys(thread)
    assert len(thread) >= 4
    assert len(set(keys)) == len(keys)
    assert keys == sorted(keys, key=lambda key: int(key.rsplit(":", 1)[1]))
    assert [m["text"].split(":")[0] for m in thread if m["text"].startswith("Part")] == [
        f"Part {index}" for index in range(4)
    ]
    assert len(slack.posted()) + len(slack.called("chat.startStream")) == len(thread)
    assert len(model_server.requests) == 1


def test_a_slack_approval_prompt_posted_before_its_receipt_was_stored_is_shown_once(
    on_slack: GatewayProcess, database_url: str, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    """Killed right after the prompt was posted: after the restart the thread has one
    prompt, whose ts the approval now has: pressing it runs the command once."""
    model_server.script(
        tool_call("run_command", {"command": "echo from-slack"}), "The command said from-slack."
    )
    _slack_crash(on_slack, "after_prompt_send", "run the echo")
    wait_all_settled(database_url)  # the resumed turn waits for the decision again
    [prompt] = slack.thread(CHANNEL, THREAD)
    assert prompt["text"] == "Allow run_command?"
    key = prompt["metadata"]["event_payload"]["key"]
    assert _press(on_slack, _approval_id(slack), user="U0ALICE", message_ts=prompt["ts"]) == 200
    [update] = slack.wait_for("chat.update", 1)
    assert update["ts"] == prompt["ts"]
    slack.wait_for("chat.postMessage", 2)
    wait_all_settled(database_url)
    thread = slack.thread(CHANNEL, THREAD)
    # The one prompt, edited to say who decided (the fake keeps chat.update's text).
    assert [m["text"] for m in thread] == [
        "slack:U0ALICE approved run_command",
        "The command said from-slack.",
    ]
    assert key.endswith(":prompt:0")
    assert len(model_server.requests) == 2
    assert "from-slack" in model_server.requests[1]["messages"][-1]["content"]


def _approval_id(slack: FakeSlack) -> str:
    blocks = slack.posted()[0]["blocks"]
    return str(blocks[1]["elements"][0]["value"])


def test_a_press_committed_just_before_a_kill_resumes_the_turn_once(
    on_slack: GatewayProcess, database_url: str, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    """The decision is stored and the process dies before the turn goes on: the next
    start runs the command once and answers once."""
    model_server.script(
        tool_call("run_command", {"command": "echo pressed"}), "The command said pressed."
    )
    on_slack.start(CHATGATE_TEST_FAULT="after_decision")
    assert _post_event(on_slack, _mention("run it", ts=THREAD))[0] == 200
    slack.wait_for("chat.postMessage", 1)
    wait_all_settled(database_url)
    [prompt] = slack.thread(CHANNEL, THREAD)
    with contextlib.suppress(OSError):  # the process dies while answering
        _press(on_slack, _approval_id(slack), user="U0ALICE", message_ts=prompt["ts"])
    assert on_slack.wait_exit() == -9, on_slack.log
    on_slack.start()
    slack.wait_for("chat.postMessage", 2)
    wait_all_settled(database_url)
    texts = [m["text"] for m in slack.thread(CHANNEL, THREAD)]
    assert texts == ["Allow run_command?", "The command said pressed."]
    assert len(model_server.requests) == 2
    assert "pressed" in model_server.requests[1]["messages"][-1]["content"]


def _discord_crash(gateway: GatewayProcess, discord: FakeDiscord, point: str, text: str) -> None:
    gateway.start(CHATGATE_TEST_FAULT=point)
    discord.wait_connected()
    discord.message_create(text, mention=True)
    assert gateway.wait_exit() == -9, gateway.log
    gateway.start()
    discord.wait_connected(2)


def test_a_discord_reply_sent_before_its_receipt_was_stored_is_not_sent_again(
    on_discord: GatewayProcess,
    database_url: str,
    model_server: FakeModelServer,
    discord: FakeDiscord,
) -> None:
    """Killed right after the create: the resend repeats the nonce with enforce_nonce, and
    Discord answers with the message it made the first time."""
    model_server.script("the only answer")
    _discord_crash(on_discord, discord, "after_send", "hello")
    wait_all_settled(database_url)
    assert [m["content"] for m in discord.created] == ["the only answer"]
    first, again = discord.called(DISCORD_POST)
    assert first["nonce"] == again["nonce"]
    assert again["enforce_nonce"] is True
    assert len(model_server.requests) == 1


def test_a_discord_approval_prompt_sent_before_its_receipt_was_stored_is_shown_once(
    on_discord: GatewayProcess,
    database_url: str,
    model_server: FakeModelServer,
    discord: FakeDiscord,
) -> None:
    """The same for a prompt: one message with buttons, and they work."""
    model_server.script(
        tool_call("run_command", {"command": "echo from-discord"}), "The command said from-discord."
    )
    _discord_crash(on_discord, discord, "after_prompt_send", "run the echo")
    wait_all_settled(database_url)
    [prompt] = discord.created
    approve = prompt["components"][0]["components"][0]["custom_id"]
    assert len(discord.called(DISCORD_POST)) == 2
    discord.press(prompt, approve, presser="301234567890123456")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(discord.created) < 2:
        time.sleep(0.05)
    wait_all_settled(database_url)
    assert [m["content"] for m in discord.created][1:] == ["The command said from-discord."]
    assert len(model_server.requests) == 2


def test_metadata_another_app_forged_does_not_stop_a_slack_reply(
    on_slack: GatewayProcess, database_url: str, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    """Killed before the send, with another app's message in the thread carrying the
    reply's delivery key: the resend does not take it for ours and posts the reply."""
    model_server.script("the real answer")
    on_slack.start(CHATGATE_TEST_FAULT="after_reply_intent")
    assert _post_event(on_slack, _mention("hello", ts=THREAD))[0] == 200
    assert on_slack.wait_exit() == -9, on_slack.log
    forged = {"event_type": "chatgate_delivery", "event_payload": {"key": "1:2:0"}}
    slack.inject(CHANNEL, THREAD, "nothing to see", forged)
    on_slack.start()
    wait_all_settled(database_url)
    assert [m["text"] for m in slack.thread(CHANNEL, THREAD)] == [
        "nothing to see",
        "the real answer",
    ]
    assert len(slack.called("conversations.replies")) == 1
    assert _keys(slack.thread(CHANNEL, THREAD)) == ["1:2:0", "1:2:0"]  # the key it forged


def test_a_long_telegram_reply_cut_between_chunks_repeats_none(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Telegram has no lookup, so each chunk's message id is journaled as it is sent:
    killed after the first of several, the resend starts at the second, and every chunk
    is in the chat once."""
    text = "\n\n".join(f"Part {index}: " + "words " * 600 for index in range(3))
    model_server.script(text)
    with FakeTelegram() as telegram:
        gateway = _gateway(tmp_path, database_url, **telegram.settings(), **model_server.settings())
        try:
            gateway.start(CHATGATE_TEST_FAULT="after_chunk_sent")
            update = {
                "update_id": 700_001,
                "message": {
                    "message_id": 41,
                    "date": int(time.time()),
                    "chat": {"id": 5150, "type": "private", "first_name": "Tess"},
                    "from": {"id": 5150, "is_bot": False, "first_name": "Tess"},
                    "text": "explain at length",
                },
            }
            status, _ = http(
                "POST",
                f"{gateway.url}/telegram/webhook",
                update,
                headers={"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
            )
            assert status == 200
            assert gateway.wait_exit() == -9, gateway.log
            assert len(telegram.delivered) == 1
            gateway.start()
            wait_all_settled(database_url)
        finally:
            gateway.stop()
        parts = [m["text"].split(":")[0] for m in telegram.delivered]
        assert parts == ["Part 0", "Part 1", "Part 2"], parts
        assert len(model_server.requests) == 1
