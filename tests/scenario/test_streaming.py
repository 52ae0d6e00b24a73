"""Replies shown as they are written, on Telegram and Discord: the real SDKs in a
``chatgate gateway`` against the fake platforms, the real litellm against a fake model that
streams slowly. The first words reach the platform long before the model finishes, updates
keep under each platform's limit per chat, the final message holds the whole reply, a fast
short reply is one post, and a gateway killed mid-stream finishes the same message after
its restart instead of posting a second one."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_server import CHANNEL, FakeDiscord
from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.slack_server import TEAM, FakeSlack
from tests.fakes.telegram_server import BOT_USERNAME, FakeTelegram
from tests.scenario.test_slack import _mention, _post_event
from tests.scenario.test_telegram import GROUP, _post, _text

# About the adapters, not the storage: the SQLite pass runs it (tests/conftest.py).
pytestmark = pytest.mark.any_database

# 40 eight-character pieces, one every 0.1 s: the model takes about 4 s to write it.
SLOW = " ".join(f"piece{i:02d}" for i in range(40))
_chunk_delay = 0.1


def _slow(text: str = SLOW) -> Scripted:
    return Scripted(text=text, chunk_delay=_chunk_delay)


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def _most_in(times: list[float], seconds: float) -> int:
    """The most calls that fall in any window of ``seconds``."""
    return max(
        (sum(1 for t in times if start <= t < start + seconds) for start in times), default=0
    )


def _wait(check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _gateway(
    database_url: str,
    model_server: FakeModelServer,
    platform: Any,
    tmp_path: Path,
    **settings: str,
) -> GatewayProcess:
    """A gateway for ``platform`` (a fake's ``settings()``), open to everyone (unless
    ``settings`` say otherwise)."""
    return GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        **{"CHATGATE_ACCESS": "open", "CHATGATE_STATE_DIR": str(tmp_path / "state"),
           **platform.settings(), **model_server.settings(), **settings},
    )  # fmt: skip


def test_telegram_private_chat_drafts_then_one_message(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    """A private chat sees the reply grow as a draft (``sendMessageDraft``, at most one a
    second), starting while the model still writes; then one ``sendMessage`` with the whole
    reply. A fast short reply is one ``sendMessage`` and no draft."""
    gateway = _gateway(database_url, model_server, telegram, tmp_path)
    gateway.start()
    try:
        model_server.script("quick one", _slow())
        assert _post(gateway, _text("say hi")) == 200
        telegram.wait_for("sendMessage", 1)
        assert telegram.called("sendMessageDraft") == []

        assert _post(gateway, _text("write slowly")) == 200
        telegram.wait_for("sendMessageDraft", 1)
        assert model_server.chunks_sent < 3 + 2 + 40  # the slow answer is not all written
        [_quick, final] = telegram.wait_for("sendMessage", 2)
        drafts = telegram.called_at("sendMessageDraft")
        assert final["text"] == SLOW
        assert len(drafts) >= 2
        assert {d["draft_id"] for _at, d in drafts} == {drafts[0][1]["draft_id"]}
        texts = [d["text"] for _at, d in drafts]
        assert all(SLOW.startswith(text) for text in texts)
        assert len(texts[0]) < len(SLOW) // 2
        assert min(_gaps([at for at, _d in drafts])) >= 0.95
        time.sleep(1.5)
        assert len(telegram.called("sendMessage")) == 2
    finally:
        gateway.stop()


def test_telegram_group_one_message_edited_under_the_limit_then_killed_mid_stream(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    """In a group the reply is one message, sent with the first words and edited at most
    every 3 s; the last edit holds the whole reply. Then a gateway SIGKILLed mid-stream:
    after its restart the turn finishes in that same message, and no second one is sent."""
    gateway = _gateway(database_url, model_server, telegram, tmp_path)
    gateway.start()
    try:
        model_server.script(_slow())
        assert _post(gateway, _text(f"@{BOT_USERNAME} write slowly", chat=GROUP)) == 200
        [first] = telegram.wait_for("sendMessage", 1)
        assert SLOW.startswith(first["text"])
        assert len(first["text"]) < len(SLOW) // 2
        _wait(lambda: any(e["text"] == SLOW for e in telegram.called("editMessageText")))
        edits = telegram.called_at("editMessageText")
        updates = [telegram.called_at("sendMessage")[0][0]] + [at for at, _e in edits]
        # Telegram takes 20 messages a minute in a group; the live updates (all but the
        # last edit, which delivers the reply) come 3 s apart at least.
        assert len(updates) >= 3
        assert min(_gaps(updates[:-1])) >= 2.95
        assert _most_in(updates, 60) <= 20
        message_id = telegram.delivered[0]["message_id"]
        assert {int(e["message_id"]) for _at, e in edits} == {message_id}
        assert len(telegram.called("sendMessage")) == 1

        # Killed after the message is sent, before the model has finished writing.
        longer = " ".join(f"slow{i:02d}" for i in range(80))  # about 8 s
        model_server.script(Scripted(text=longer, chunk_delay=0.1), longer)
        assert _post(gateway, _text(f"@{BOT_USERNAME} once more", chat=GROUP)) == 200
        telegram.wait_for("sendMessage", 2)
        gateway.kill()
        cut = telegram.delivered[1]
        assert longer.startswith(cut["text"])
        assert cut["text"] != longer
        gateway.start()
        _wait(lambda: telegram.messages[(GROUP, cut["message_id"])]["text"] == longer, 60)
        time.sleep(1.5)
        assert len(telegram.called("sendMessage")) == 2  # no second message for the reply
        assert len(model_server.requests) == 3  # the cut model call was made again, once
    finally:
        gateway.stop()


def test_discord_one_message_edited_under_the_limit_and_a_short_reply_posted_once(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> None:
    """The reply is one message, posted with the first words (a reply to the mention) and
    edited at most every 1.2 s; the last edit holds the whole reply. A fast short reply is
    one post and no edit."""
    gateway = _gateway(database_url, model_server, discord, tmp_path)
    gateway.start()
    discord.wait_connected()
    try:
        model_server.script("quick one", _slow())
        discord.message_create("say hi", mention=True)
        _wait(lambda: len(discord.created) == 1)
        message = discord.message_create("write slowly", mention=True)
        _wait(lambda: len(discord.created) == 2)
        live = discord.created[1]
        assert live["message_reference"]["message_id"] == int(message["id"])
        assert SLOW.startswith(live["content"])
        assert len(live["content"]) < len(SLOW) // 2
        _wait(lambda: discord.messages[live["id"]]["content"] == SLOW)
        route = f"PATCH channels/{CHANNEL}/messages/{live['id']}"
        edits = discord.called_at(route)
        posted_at = discord.called_at(f"POST channels/{CHANNEL}/messages")[1][0]
        updates = [posted_at] + [at for at, _e in edits]
        # Discord takes five messages or edits per five seconds in a channel; the live
        # updates (all but the last edit, which delivers the reply) come 1.2 s apart.
        assert len(updates) >= 3
        assert min(_gaps(updates[:-1])) >= 1.15
        assert _most_in(updates, 5.0) <= 5
        time.sleep(1.5)
        assert len(discord.created) == 2
        assert [e for name, e in discord.calls if name.startswith("PATCH")] == [
            e for _at, e in edits
        ]  # the quick reply was never edited
    finally:
        gateway.stop()


def test_slack_streams_into_the_thread_and_a_short_reply_is_one_post(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """A slow reply is Slack's chat stream in the mention's thread, for the person who
    asked: started with the first words, appended to at most once a second, stopped with
    the rest and the delivery's metadata; no chat.postMessage for it. A fast short reply is
    one chat.postMessage and no stream."""
    gateway = _gateway(database_url, model_server, slack, tmp_path)
    gateway.start()
    try:
        model_server.script("quick one", _slow())
        assert _post_event(gateway, _mention("say hi", ts="1700000100.000100"))[0] == 200
        slack.wait_for("chat.postMessage", 1)
        assert _post_event(
            gateway, _mention("write slowly", ts="1700000200.000100", event_id="Ev2")
        ) == (200, "")
        [start] = slack.wait_for("chat.startStream", 1)
        assert model_server.chunks_sent < 3 + 2 + 40
        assert start["thread_ts"] == "1700000200.000100"
        assert (start["recipient_team_id"], start["recipient_user_id"]) == (TEAM, "U0ALICE")
        assert SLOW.startswith(start["markdown_text"])
        [stop] = slack.wait_for("chat.stopStream", 1)
        streamed = slack.message(stop["ts"])
        assert streamed is not None
        assert streamed["text"] == SLOW
        assert not streamed["streaming"]
        assert streamed["metadata"]["event_payload"]["key"].endswith(":0")
        appends = slack.called_at("chat.appendStream")
        assert appends
        started_at = slack.called_at("chat.startStream")[0][0]
        assert min(_gaps([started_at] + [at for at, _a in appends])) >= 0.95
        time.sleep(1.5)
        assert len(slack.posted()) == 1  # the quick reply only

        # What the model writes cannot ping anyone through the stream.
        loud = "Heads up <!channel> and <@U0BOSS>: " + SLOW
        model_server.script(Scripted(text=loud, chunk_delay=_chunk_delay))
        event = _mention("shout", ts="1700000250.000100", event_id="EvLoud")
        assert _post_event(gateway, event)[0] == 200
        slack.wait_for("chat.stopStream", 2)
        shouted = slack.message(slack.called("chat.stopStream")[1]["ts"])
        assert shouted is not None
        assert "<!channel>" not in shouted["text"]
        assert "<@U0BOSS>" not in shouted["text"]
        assert shouted["text"] == loud.replace("<!", "<\u200b!").replace("<@", "<\u200b@")
    finally:
        gateway.stop()


def test_slack_without_streaming_posts_and_updates_and_a_kill_finishes_the_same_message(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """An app Slack will not stream for: the reply is one message, posted with the first
    words and updated (chat.startStream is not tried again). Then, streaming again, a
    gateway SIGKILLed mid-stream: after the restart the stream is stopped and its message
    replaced with the whole reply; nothing else is posted."""
    slack.streaming = False
    gateway = _gateway(database_url, model_server, slack, tmp_path)
    gateway.start()
    try:
        model_server.script(_slow(), _slow())
        for index in (1, 2):
            event = _mention(f"write slowly {index}", ts=f"17000003{index}0.000100")
            assert _post_event(gateway, event | {"event_id": f"EvSlow{index}"})[0] == 200
            _wait(lambda index=index: len(slack.posted()) == index)  # type: ignore[misc]
            _wait(lambda index=index: slack.messages[index - 1]["text"] == SLOW)  # type: ignore[misc]
        assert len(slack.called("chat.startStream")) == 1
        first = slack.posted()[0]
        assert SLOW.startswith(first["text"])
        assert first["thread_ts"] == "1700000310.000100"
        updates = [u for u in slack.called("chat.update") if u["ts"] == slack.messages[0]["ts"]]
        assert len(updates) >= 2
        assert updates[-1]["text"] == SLOW
        gateway.stop()

        slack.streaming = True
        gateway = _gateway(database_url, model_server, slack, tmp_path)
        gateway.start()
        longer = " ".join(f"slow{i:02d}" for i in range(80))  # about 8 s
        model_server.script(Scripted(text=longer, chunk_delay=0.1), longer)
        event = _mention("once more", ts="1700000400.000100", event_id="EvKill")
        assert _post_event(gateway, event)[0] == 200
        slack.wait_for("chat.startStream", 2)
        slack.wait_for("chat.appendStream", 1)
        gateway.kill()
        streamed = slack.messages[-1]
        assert streamed["streaming"]
        assert streamed["text"] != longer
        gateway.start()
        _wait(lambda: streamed["text"] == longer and not streamed["streaming"], 60)
        time.sleep(1.5)
        assert len(slack.posted()) == 2  # the two replies before; none for this one
        assert len(slack.called("chat.startStream")) == 2
        assert streamed["metadata"]["event_payload"]["key"].endswith(":0")
        assert len(model_server.requests) == 4  # the cut model call made again, once
    finally:
        gateway.stop()


@pytest.mark.parametrize("platform", ["discord", "slack"])
def test_killed_between_posting_the_live_message_and_journaling_it_no_second_message(
    database_url: str,
    model_server: FakeModelServer,
    discord: FakeDiscord,
    slack: FakeSlack,
    tmp_path: Path,
    platform: str,
) -> None:
    """The gateway dies right after the first update posted the live message, before the
    journal has its id (``after_live_post``): the restarted gateway finds it (Discord: the
    post's nonce; Slack: the thread read back) and delivers the reply into it. One message
    for the reply, holding all of it."""
    fake: Any = discord if platform == "discord" else slack
    gateway = _gateway(database_url, model_server, fake, tmp_path)
    model_server.script(_slow(), "the whole reply, written fast this time")
    gateway.start(CHATGATE_TEST_FAULT="after_live_post")
    if platform == "discord":
        discord.wait_connected()
        discord.message_create("write slowly", mention=True)
    else:
        event = _mention("write slowly", ts="1700000700.000100", event_id="EvLivePost")
        assert _post_event(gateway, event)[0] == 200
    deadline = time.monotonic() + 30
    while gateway.process is not None and gateway.process.poll() is None:
        assert time.monotonic() < deadline, "the fault point was not reached"
        time.sleep(0.05)
    gateway.start()
    if platform == "discord":
        discord.wait_connected()
    try:
        final = "the whole reply, written fast this time"
        if platform == "discord":
            _wait(lambda: any(m["content"] == final for m in discord.messages.values()), 60)
            time.sleep(1.5)
            assert len(discord.created) == 1
        else:
            _wait(lambda: any(m["text"] == final for m in slack.messages), 60)
            time.sleep(1.5)
            ours = [m for m in slack.messages if m["thread_ts"] == "1700000700.000100"]
            assert len(ours) == 1
            assert not ours[0].get("streaming")
        assert len(model_server.requests) == 2
    finally:
        gateway.stop()
