"""What a turn that takes a while is doing, shown on the message that opened it, on Slack,
Telegram and Discord: the real SDKs against the fake platforms, the real litellm against
a fake model. A quick answer leaves the message alone; a slow one is marked working (with
"typing…" on Telegram) and then done; ``CHATGATE_STATUS_MARKS=false`` turns it off."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from tests.fakes.database_reads import read_database
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.scenario.test_slack import CHANNEL, _mention, _post_event
from tests.scenario.test_streaming import _gateway, _wait
from tests.scenario.test_telegram import ALICE, _post, _text

pytestmark = pytest.mark.any_database


def test_slack_a_slow_turn_is_marked_working_then_done_and_a_quick_one_not_at_all(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, slack, tmp_path)
    gateway.start()
    try:
        model_server.script("quick", Scripted(text="slow", delay=2.5))
        assert _post_event(gateway, _mention("hi", ts="1700000500.000100"))[0] == 200
        slack.wait_for("chat.postMessage", 1)
        event = _mention("think", ts="1700000600.000100", event_id="EvSlowMark")
        assert _post_event(gateway, event)[0] == 200
        _wait(
            lambda: (
                slack.reactions.get((CHANNEL, "1700000600.000100")) == ["hourglass_flowing_sand"]
            )
        )
        slack.wait_for("chat.stopStream", 1)  # slow, so shown as it was written
        _wait(lambda: slack.reactions[(CHANNEL, "1700000600.000100")] == ["white_check_mark"])
        assert (CHANNEL, "1700000500.000100") not in slack.reactions
    finally:
        gateway.stop()


def test_telegram_a_slow_turn_shows_typing_and_reactions(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, telegram, tmp_path)
    gateway.start()
    try:
        model_server.script(Scripted(text="slow", delay=5.5))
        update = _text("think hard")
        assert _post(gateway, update) == 200
        key = (ALICE, update["message"]["message_id"])
        _wait(lambda: telegram.reactions.get(key) == ["✍"])
        telegram.wait_for("sendMessage", 1)
        _wait(lambda: telegram.reactions.get(key) == ["👌"])
        typing = telegram.called("sendChatAction")
        assert len(typing) >= 2  # renewed while the turn worked (it lasts five seconds)
        assert {t["action"] for t in typing} == {"typing"}
    finally:
        gateway.stop()


def test_discord_marks_a_slow_turn_and_the_setting_turns_it_off(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, discord, tmp_path)
    gateway.start()
    discord.wait_connected()
    try:
        model_server.script(Scripted(text="slow", delay=2.5))
        message = discord.message_create("think", mention=True)
        _wait(lambda: discord.reactions.get(message["id"]) == ["⏳"])
        _wait(lambda: discord.reactions.get(message["id"]) == ["✅"])
    finally:
        gateway.stop()
    gateway.start(CHATGATE_STATUS_MARKS="false")
    discord.wait_connected()
    try:
        model_server.script(Scripted(text="slow again", delay=2.5))
        second = discord.message_create("think again", mention=True)
        _wait(lambda: any(m["content"] == "slow again" for m in discord.created))
        assert second["id"] not in discord.reactions
    finally:
        gateway.stop()


def test_slack_a_message_behind_a_running_turn_is_marked_received_then_done(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """Busy mode ``queue``: the second message waits for the first turn, and says so at
    once (👀); its own quick turn then replaces that with done. The first, quick too,
    is left alone."""
    gateway = _gateway(database_url, model_server, slack, tmp_path)
    gateway.start()
    try:
        model_server.script(Scripted(text="first", delay=3), "second")
        assert _post_event(gateway, _mention("one", ts="1700000700.000100"))[0] == 200
        _wait(lambda: len(model_server.requests) == 1)
        event = _mention("two", ts="1700000701.000100", event_id="EvBehind")
        event["event"]["thread_ts"] = "1700000700.000100"  # the same conversation
        assert _post_event(gateway, event)[0] == 200
        _wait(lambda: slack.reactions.get((CHANNEL, "1700000701.000100")) == ["eyes"])
        assert not slack.posted()  # marked before the first turn answered
        slack.wait_for("chat.stopStream", 1)  # the first, slow, was shown as it was written
        slack.wait_for("chat.postMessage", 1)
        _wait(lambda: slack.reactions[(CHANNEL, "1700000701.000100")] == ["white_check_mark"])
        assert [m["text"] for m in slack.messages] == ["first", "second"]
        # The first turn marked working after a second, then done; never "received".
        assert slack.reactions[(CHANNEL, "1700000700.000100")] == ["white_check_mark"]
    finally:
        gateway.stop()


def test_slack_a_turn_resumed_after_a_kill_replaces_the_mark_the_dead_process_left(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """The journal keeps the mark shown: the resumed turn, though quick, takes the dead
    process's "working" off and marks it done (not both)."""
    gateway = _gateway(database_url, model_server, slack, tmp_path)
    gateway.start()
    try:
        model_server.script(Scripted(text="never", delay=30), "after the restart")
        assert _post_event(gateway, _mention("think", ts="1700000800.000100"))[0] == 200
        key = (CHANNEL, "1700000800.000100")
        _wait(lambda: slack.reactions.get(key) == ["hourglass_flowing_sand"])
        # Killed once the mark is journaled too (a mark is shown, then journaled: a kill
        # between the two leaves the shown mark to the resumed turn's next one).
        _wait(lambda: _journaled_mark(database_url) == "working")
        gateway.kill()
        gateway.start()
        slack.wait_for("chat.postMessage", 1)
        _wait(lambda: slack.reactions[key] == ["white_check_mark"])
        assert [p["text"] for p in slack.posted()] == ["after the restart"]
        assert len(model_server.requests) == 2
    finally:
        gateway.stop()


def _journaled_mark(database_url: str) -> str | None:
    """The first turn's mark as the journal holds it."""
    return read_database(
        database_url,
        lambda conn: conn.execute(text("SELECT marked FROM turns WHERE id = 1")).scalar(),
    )
