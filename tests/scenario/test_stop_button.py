"""The Stop button on a reply shown as it is written (a Telegram group, Discord): the real
SDKs in a ``chatgate gateway`` against the fake platforms, the real litellm against a fake
model that writes slowly. Pressed, the turn ends at its next step boundary and the message
says who stopped it, the button gone; pressed again, or on a finished reply, it stops
nothing else and says so to the presser alone."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.telegram_server import BOT_USERNAME, FakeTelegram
from tests.scenario.test_discord import ALICE as DISCORD_ALICE
from tests.scenario.test_discord import MALLORY, _followups
from tests.scenario.test_streaming import _gateway, _wait
from tests.scenario.test_telegram import ALICE, GROUP, _callback, _post, _text

pytestmark = pytest.mark.any_database

# About 20 s of writing, one piece every 0.25 s: only a stop ends it in time.
LONG = " ".join(f"piece{i:02d}" for i in range(80))


def _markup(message: dict[str, Any]) -> Any:
    markup = message.get("reply_markup")
    return json.loads(markup) if isinstance(markup, str) else markup


def test_telegram_group_stop_button_stops_the_turn_and_goes_away(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, telegram, tmp_path)
    gateway.start()
    try:
        model_server.script(Scripted(text=LONG, chunk_delay=0.25), "the next answer")
        assert _post(gateway, _text(f"@{BOT_USERNAME} write a lot", chat=GROUP)) == 200
        telegram.wait_for("sendMessage", 1)
        message = telegram.delivered[0]
        [[button]] = _markup(message)["inline_keyboard"]
        assert button["text"] == "Stop"
        assert button["callback_data"].startswith("st:")
        assert _post(gateway, _callback(button["callback_data"], user=ALICE, message=message))
        key = (GROUP, message["message_id"])
        _wait(lambda: telegram.messages[key]["text"].endswith(f"Stopped by telegram:{ALICE}."))
        stopped = telegram.messages[key]
        assert LONG not in stopped["text"]  # it ended long before the model would have
        assert not _markup(stopped)  # the button is gone
        assert model_server.chunks_sent < 60

        # Pressed again, on a finished reply: nothing is stopped, the presser is told.
        assert _post(gateway, _callback(button["callback_data"], user=ALICE, message=message))
        [*_, answer] = telegram.wait_for("answerCallbackQuery", 2)
        assert answer["text"] == "That reply is finished: nothing to stop."
        assert answer["show_alert"] in (True, "true", "True")
        assert _post(gateway, _text(f"@{BOT_USERNAME} and now?", chat=GROUP)) == 200
        _wait(lambda: any(m["text"] == "the next answer" for m in telegram.delivered))
        assert len(telegram.called("sendMessage")) == 2
    finally:
        gateway.stop()


def test_discord_stop_button_stops_the_turn_and_a_stranger_cannot_press_it(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, discord, tmp_path)
    gateway.start(CHATGATE_ACCESS="allowlist", CHATGATE_ALLOW=f"discord:{DISCORD_ALICE}")
    discord.wait_connected()
    try:
        model_server.script(Scripted(text=LONG, chunk_delay=0.25))
        discord.message_create("write a lot", mention=True)
        _wait(lambda: len(discord.created) == 1)
        live = discord.created[0]
        [row] = live["components"]
        [button] = row["components"]
        assert button["label"] == "Stop"
        assert button["custom_id"].startswith("cg:turn:stop:")

        # Someone not let in presses it: refused, to them alone; the turn writes on.
        discord.press(live, button["custom_id"], presser=MALLORY)
        _wait(lambda: _followups(discord))
        [refusal] = _followups(discord)
        assert "may not talk to the agent" in refusal["content"]
        assert refusal["flags"] & 64  # ephemeral
        time.sleep(1.5)
        assert "Stopped" not in discord.messages[live["id"]]["content"]

        discord.press(live, button["custom_id"], presser=DISCORD_ALICE)
        stopped = f"Stopped by discord:{DISCORD_ALICE}."
        _wait(lambda: discord.messages[live["id"]]["content"].endswith(stopped))
        assert not discord.messages[live["id"]]["components"]
        assert LONG not in discord.messages[live["id"]]["content"]
        assert len(discord.created) == 1
        assert len(model_server.requests) == 1
    finally:
        gateway.stop()
