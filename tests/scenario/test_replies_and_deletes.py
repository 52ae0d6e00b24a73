"""Replies and deletes through the real SDKs against the fake platforms (issue #29): a
Telegram reply to the bot's earlier message puts that message before the person's words in
what the model sees; a Slack message its author deleted is gone from what the next turn
sees."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.slack_server import BOT_USER, TEAM, FakeSlack
from tests.fakes.telegram_server import BOT_ID, BOT_USERNAME, FakeTelegram
from tests.scenario.test_slack import CHANNEL, _mention, _post_event
from tests.scenario.test_streaming import _gateway as _platform_gateway
from tests.scenario.test_telegram import GROUP, _post, _text
from tests.scenario.test_tool_crashes import tool_call

pytestmark = pytest.mark.any_database


@pytest.fixture
def telegram_gateway(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> Iterator[GatewayProcess]:
    process = _platform_gateway(database_url, model_server, telegram, tmp_path)
    process.start()
    yield process
    process.stop()


def test_a_telegram_reply_to_the_bots_message_shows_the_model_that_message(
    telegram_gateway: GatewayProcess, model_server: FakeModelServer, telegram: FakeTelegram
) -> None:
    model_server.script("The incident started at 09:12 and paged Sam.", "It ended at 09:40.")
    assert _post(telegram_gateway, _text(f"@{BOT_USERNAME} when did it start?", chat=GROUP)) == 200
    telegram.wait_for("sendMessage", 1)
    # Someone replies to the bot's answer, without mentioning it (a reply addresses it).
    update = _text("and when did it end?", chat=GROUP, user=5559876)
    update["message"]["reply_to_message"] = {
        "message_id": 1,  # (the bot's answer; its id does not matter here)
        "date": int(time.time()),
        "chat": {"id": GROUP, "type": "supergroup"},
        "from": {"id": BOT_ID, "is_bot": True, "first_name": "chatgate"},
        "text": "The incident started at 09:12 and paged Sam.",
    }
    assert _post(telegram_gateway, update) == 200
    telegram.wait_for("sendMessage", 2)
    asked = model_server.requests[1]["messages"][-1]["content"]
    assert asked == (
        '[Replying to your earlier message: "The incident started at 09:12 and paged Sam."]\n'
        "and when did it end?"
    )


def _deleted(ts: str, *, thread: str) -> dict[str, Any]:
    return {
        "token": "unused",
        "team_id": TEAM,
        "api_app_id": "A0CHATGATE",
        "type": "event_callback",
        "event_id": f"EvDel{ts}",
        "event_time": int(time.time()),
        "event": {
            "type": "message",
            "subtype": "message_deleted",
            "hidden": True,
            "channel": CHANNEL,
            "deleted_ts": ts,
            "previous_message": {"type": "message", "user": "U0ALICE", "ts": ts,
                                 "thread_ts": thread, "text": "gone"},
            "event_ts": f"{time.time():.6f}",
            "ts": f"{time.time():.6f}",
            "channel_type": "channel",
        },
    }  # fmt: skip


def _thread_reply(text: str, *, ts: str, thread: str) -> dict[str, Any]:
    envelope = _mention(text, ts=ts, event_id=f"Ev{ts}")
    envelope["event"] |= {"type": "message", "text": text, "thread_ts": thread}
    return envelope


def test_a_deleted_slack_message_is_gone_from_what_the_next_turn_sees(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    # Replies are counted as chat.postMessage: unstreamed, so a reply that takes over a
    # second on a loaded machine is not shown as a Slack stream instead.
    process = _platform_gateway(
        database_url, model_server, slack, tmp_path, CHATGATE_STREAM_REPLIES="false"
    )
    process.start()
    try:
        thread = "1700000100.000100"
        model_server.script("Noted.", "Stored it.", "You told me nothing else.")
        assert _post_event(process, _mention("deploy window is Friday", ts=thread))[0] == 200
        slack.wait_for("chat.postMessage", 1)
        secret = _thread_reply("my password is hunter2", ts="1700000101.000100", thread=thread)
        assert _post_event(process, secret)[0] == 200
        slack.wait_for("chat.postMessage", 2)
        assert _post_event(process, _deleted("1700000101.000100", thread=thread))[0] == 200
        time.sleep(0.5)
        ask = _thread_reply("what did I tell you?", ts="1700000102.000100", thread=thread)
        assert _post_event(process, ask)[0] == 200
        slack.wait_for("chat.postMessage", 3)
        seen = json.dumps(model_server.requests[2]["messages"])
        assert "hunter2" not in seen
        assert "deploy window is Friday" in seen
        assert "hunter2" in json.dumps(model_server.requests[1]["messages"])
    finally:
        process.stop()


def _edited(ts: str, text: str, *, thread: str, before: str) -> dict[str, Any]:
    now = f"{time.time():.6f}"
    return {
        "token": "unused",
        "team_id": TEAM,
        "api_app_id": "A0CHATGATE",
        "type": "event_callback",
        "event_id": f"EvEdit{ts}{len(text)}",
        "event_time": int(time.time()),
        "event": {
            "type": "message",
            "subtype": "message_changed",
            "hidden": True,
            "channel": CHANNEL,
            "message": {"type": "message", "user": "U0ALICE", "text": text, "ts": ts,
                        "thread_ts": thread, "edited": {"user": "U0ALICE", "ts": now}},
            "previous_message": {"type": "message", "user": "U0ALICE", "text": before,
                                 "ts": ts, "thread_ts": thread},
            "event_ts": now,
            "ts": now,
            "channel_type": "channel",
        },
    }  # fmt: skip


@pytest.mark.parametrize("busy", ["queue", "steer"])
def test_a_slack_edit_follows_the_turn_it_belongs_to(
    busy: str, database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """queue: a message waiting behind the running turn is edited before its turn starts,
    and its turn reads the new text. steer: the running turn's own message is edited, and
    the edit joins that turn before its next model call (no turn of its own)."""
    process = _platform_gateway(
        database_url, model_server, slack, tmp_path,
        CHATGATE_BUSY_MODE=busy, CHATGATE_STREAM_REPLIES="false",
    )  # fmt: skip
    process.start()
    try:
        thread = "1700000100.000100"
        slow = Scripted(tool_calls=tool_call("list_schedules", {}).tool_calls, delay=2.0)
        model_server.script(slow, "First answered.", "Second answered.")
        assert _post_event(process, _mention("deploy at 9 please", ts=thread))[0] == 200
        model_server.wait_for_requests(1)
        if busy == "queue":
            waiting = _thread_reply("and tell Sam at 9", ts="1700000101.000100", thread=thread)
            assert _post_event(process, waiting)[0] == 200
            time.sleep(0.3)
            edit = _edited("1700000101.000100", "and tell Sam at 10", thread=thread,
                           before="and tell Sam at 9")  # fmt: skip
            assert _post_event(process, edit)[0] == 200
            slack.wait_for("chat.postMessage", 2)
            assert model_server.user_texts()[-1] == "and tell Sam at 10"
            assert len(model_server.requests) == 3
        else:
            edit = _edited(thread, f"<@{BOT_USER}> deploy at 10 please", thread=thread,
                           before=f"<@{BOT_USER}> deploy at 9 please")  # fmt: skip
            assert _post_event(process, edit)[0] == 200
            slack.wait_for("chat.postMessage", 1)
            time.sleep(1.0)
            second = json.dumps(model_server.requests[1]["messages"])
            assert "(I edited my last message; it now says:) deploy at 10 please" in second
            assert len(model_server.requests) == 2  # the edit was taken into the turn
            assert len(slack.posted()) == 1
    finally:
        process.stop()
