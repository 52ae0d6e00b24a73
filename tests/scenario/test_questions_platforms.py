"""``ask_user`` on each chat platform (issue #29), the real SDKs in a ``chatgate gateway``
process against the fake platform servers: the question renders as native buttons; a
press by someone else is refused to them alone; the gateway is killed between question and
press and the button still answers it after the restart; the turn resumes with the choice;
"Other" takes the asker's next message as the answer. Each test runs one turn that asks
twice, and counts model calls exactly."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_server import CHANNEL as DISCORD_CHANNEL
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.slack_server import FakeSlack, posted_ts
from tests.fakes.telegram_server import FakeTelegram
from tests.scenario.test_approvals_api import tool_call
from tests.scenario.test_discord import ALICE as DISCORD_ALICE
from tests.scenario.test_discord import MALLORY as DISCORD_MALLORY
from tests.scenario.test_discord import _followups, _wait_created
from tests.scenario.test_slack import _mention, _post_event, _press
from tests.scenario.test_telegram import ALICE, MALLORY, _callback, _post, _text
from tests.scenario.test_telegram import _gateway as telegram_gateway

pytestmark = pytest.mark.any_database

FIRST = {"question": "Which environment?", "options": ["staging", "production"]}
SECOND = {"question": "When?", "options": ["now", "tonight"], "allow_other": True}


def _script(model_server: FakeModelServer) -> None:
    model_server.script(
        tool_call("ask_user", FIRST, call_id="call_1"),
        tool_call("ask_user", SECOND, call_id="call_2"),
        "Deploying to production after the standup.",
    )


def _results(model_server: FakeModelServer) -> list[dict[str, Any]]:
    """The answers the model read: the last tool message of its second and third calls."""
    return [
        json.loads(model_server.requests[n]["messages"][-1]["content"])
        for n in range(1, len(model_server.requests))
    ]


def _expected(user: str) -> list[dict[str, Any]]:
    return [
        {"answer": "production", "answered_by": user, "typed": False},
        {"answer": "after the standup", "answered_by": user, "typed": True},
    ]


def _waits(gateway: GatewayProcess, count: int = 1) -> None:
    """Until the turn waits (the prompt's receipt stored) ``count`` times in all."""
    deadline = time.monotonic() + 20
    while gateway.log.count("turn waiting for a decision") < count:
        assert time.monotonic() < deadline, gateway.log[-3000:]
        time.sleep(0.05)


def platform_gateway(
    database_url: str,
    model_server: FakeModelServer,
    tmp_path: Path,
    platform: dict[str, str],
    **settings: str,
) -> GatewayProcess:
    """A gateway open to everyone, posting replies whole, on a fake platform (its
    ``settings()``)."""
    return GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_STREAM_REPLIES="false",
        **platform,
        **model_server.settings(),
        **settings,
    )


def _until(condition: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# Telegram ---------------------------------------------------------------------------


def test_telegram_asks_on_an_inline_keyboard(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    _script(model_server)
    with FakeTelegram() as telegram:
        gateway = telegram_gateway(database_url, model_server, telegram, tmp_path)
        gateway.start()
        try:
            assert _post(gateway, _text("deploy it")) == 200
            [prompt] = telegram.wait_for("sendMessage", 1)
            assert "Which environment?" in prompt["text"]
            keyboard = prompt["reply_markup"]["inline_keyboard"]
            assert [[b["text"] for b in row] for row in keyboard] == [["staging", "production"]]
            production = keyboard[0][1]["callback_data"]
            assert production.startswith("qa:ap_")
            assert production.endswith(":1")
            shown = telegram.delivered[0]
            _waits(gateway)
            gateway.kill()
            gateway.start()
            assert _post(gateway, _callback(production, user=MALLORY, message=shown)) == 200
            [refused] = telegram.wait_for("answerCallbackQuery", 1)
            assert "only they can answer it" in refused["text"]
            assert len(model_server.requests) == 1
            assert _post(gateway, _callback(production, user=ALICE, message=shown)) == 200
            [edit] = telegram.wait_for("editMessageText", 1)
            assert "telegram:5551234 answered: production" in edit["text"]
            assert not edit.get("reply_markup")
            # The second question: "Other", then the words.
            second = telegram.wait_for("sendMessage", 2)[1]
            rows = second["reply_markup"]["inline_keyboard"]
            assert [[b["text"] for b in row] for row in rows] == [["now", "tonight"], ["Other…"]]
            other = rows[1][0]["callback_data"]
            assert (
                _post(gateway, _callback(other, user=ALICE, message=telegram.delivered[1])) == 200
            )
            edits = telegram.wait_for("editMessageText", 2)
            assert "type your answer" in edits[1]["text"]
            assert _post(gateway, _text("after the standup")) == 200
            sent = telegram.wait_for("sendMessage", 3)
            assert sent[2]["text"] == "Deploying to production after the standup."
            assert _results(model_server) == _expected("telegram:5551234")
            time.sleep(1)
            assert len(model_server.requests) == 3
            assert len(telegram.called("sendMessage")) == 3
        finally:
            gateway.stop()


# Slack ------------------------------------------------------------------------------

THREAD = "1700000100.000100"


def _slack_press(
    gateway: GatewayProcess, button: dict[str, Any], *, user: str, message_ts: str
) -> int:
    return _press(
        gateway, button["value"], user=user, message_ts=message_ts, action_id=button["action_id"]
    )


def _buttons(post: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = post["blocks"] if isinstance(post["blocks"], list) else json.loads(post["blocks"])
    elements: list[dict[str, Any]] = blocks[-1]["elements"]
    return elements


def test_slack_asks_with_block_kit_buttons(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    _script(model_server)
    with FakeSlack() as slack:
        gateway = platform_gateway(database_url, model_server, tmp_path, slack.settings())
        gateway.start()
        try:
            assert _post_event(gateway, _mention("deploy it", ts=THREAD))[0] == 200
            [prompt] = slack.wait_for("chat.postMessage", 1)
            assert prompt["thread_ts"] == THREAD
            buttons = _buttons(prompt)
            assert [b["text"]["text"] for b in buttons] == ["staging", "production"]
            assert buttons[1]["action_id"] == "chatgate_answer:1"
            _waits(gateway)
            first_ts = posted_ts(1)
            gateway.kill()
            gateway.start()
            assert _slack_press(gateway, buttons[1], user="U0MALLORY", message_ts=first_ts) == 200
            [refusal] = slack.wait_for("chat.postEphemeral", 1)
            assert refusal["user"] == "U0MALLORY"
            assert "only they can answer it" in refusal["text"]
            assert len(model_server.requests) == 1
            assert _slack_press(gateway, buttons[1], user="U0ALICE", message_ts=first_ts) == 200
            [update] = slack.wait_for("chat.update", 1)
            assert update["ts"] == first_ts
            assert "slack:U0ALICE answered: production" in update["text"]
            second = slack.wait_for("chat.postMessage", 2)[1]
            buttons = _buttons(second)
            assert [b["text"]["text"] for b in buttons] == ["now", "tonight", "Other…"]
            second_ts = posted_ts(2)
            assert _slack_press(gateway, buttons[2], user="U0ALICE", message_ts=second_ts) == 200
            updates = slack.wait_for("chat.update", 2)
            assert "type your answer" in updates[1]["text"]
            typed = _mention("x", ts="1700000101.000100", event_id="EvTyped")
            typed["event"] |= {
                "type": "message",
                "text": "after the standup",
                "thread_ts": THREAD,
                "channel_type": "channel",
            }
            assert _post_event(gateway, typed)[0] == 200
            posts = slack.wait_for("chat.postMessage", 3)
            assert posts[2]["text"] == "Deploying to production after the standup."
            assert _results(model_server) == _expected("slack:U0ALICE")
            time.sleep(1)
            assert len(model_server.requests) == 3
            assert len(slack.posted("chat.postMessage")) == 3
        finally:
            gateway.stop()


# Discord ----------------------------------------------------------------------------


def test_discord_asks_with_message_components(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    _script(model_server)
    with FakeDiscord() as discord:
        gateway = platform_gateway(database_url, model_server, tmp_path, discord.settings())
        gateway.start()
        discord.wait_connected()
        try:
            discord.message_create("deploy it", mention=True)
            [prompt] = _wait_created(discord, 1)
            assert "Which environment?" in prompt["content"]
            buttons = [b for row in prompt["components"] for b in row["components"]]
            assert [b["label"] for b in buttons] == ["staging", "production"]
            production = buttons[1]["custom_id"]
            assert production.startswith("cg:q:answer:ap_")
            assert production.endswith("_1")
            _waits(gateway)
            gateway.kill()
            gateway.start()
            discord.wait_connected(2)
            discord.press(prompt, production, presser=DISCORD_MALLORY)
            _until(lambda: bool(_followups(discord)))
            [refusal] = _followups(discord)
            assert refusal["flags"] & 64  # ephemeral
            assert "only they can answer it" in refusal["content"]
            assert len(model_server.requests) == 1
            discord.press(prompt, production, presser=DISCORD_ALICE)
            route = f"PATCH channels/{DISCORD_CHANNEL}/messages/{prompt['id']}"
            [edit] = discord.wait_for(route, 1)
            assert f"discord:{DISCORD_ALICE} answered: production" in edit["content"]
            assert edit["components"] == []
            second = _wait_created(discord, 2)[1]
            buttons = [b for row in second["components"] for b in row["components"]]
            assert [b["label"] for b in buttons] == ["now", "tonight", "Other…"]
            discord.press(second, buttons[2]["custom_id"], presser=DISCORD_ALICE)
            route = f"PATCH channels/{DISCORD_CHANNEL}/messages/{second['id']}"
            [edit] = discord.wait_for(route, 1)
            assert "type your answer" in edit["content"]
            discord.message_create("after the standup", mention=True)
            replies = _wait_created(discord, 3)
            assert replies[2]["content"] == "Deploying to production after the standup."
            assert _results(model_server) == _expected(f"discord:{DISCORD_ALICE}")
            time.sleep(1)
            assert len(model_server.requests) == 3
            assert len(discord.created) == 3
        finally:
            gateway.stop()


def test_answering_one_of_two_prompts_does_not_post_the_other_again(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """One response asks a question and calls a command that needs approval. The answer
    wakes the turn while the approval still waits: its prompt, already shown, is not
    posted again (Telegram cannot tell a repeat), the command does not run, and once it is
    approved the turn goes on with both results, once."""
    both = Scripted(
        tool_calls=[
            {
                "id": "call_q",
                "type": "function",
                "function": {"name": "ask_user", "arguments": json.dumps(FIRST)},
            },
            {
                "id": "call_c",
                "type": "function",
                "function": {
                    "name": "run_command",
                    "arguments": json.dumps({"command": "echo ran >> runs; cat runs"}),
                },
            },
        ]
    )
    model_server.script(both, "Deployed to production.")
    with FakeTelegram() as telegram:
        gateway = telegram_gateway(database_url, model_server, telegram, tmp_path)
        gateway.start()
        try:
            assert _post(gateway, _text("deploy it")) == 200
            prompts = telegram.wait_for("sendMessage", 2)
            keyboards = [p["reply_markup"]["inline_keyboard"] for p in prompts]
            question = next(k for k in keyboards if k[0][0]["callback_data"].startswith("qa:"))
            approval = next(k for k in keyboards if k[0][0]["callback_data"].startswith("ap:"))
            _waits(gateway)
            production = question[0][1]["callback_data"]
            first = next(m for m in telegram.delivered if "Which environment" in m["text"])
            assert _post(gateway, _callback(production, user=ALICE, message=first)) == 200
            telegram.wait_for("editMessageText", 1)
            _waits(gateway, 2)  # woken by the answer, it waits again for the approval
            assert len(telegram.called("sendMessage")) == 2
            assert len(model_server.requests) == 1
            other = next(m for m in telegram.delivered[:2] if m is not first)
            approve = approval[0][0]["callback_data"]
            assert _post(gateway, _callback(approve, user=ALICE, message=other)) == 200
            sent = telegram.wait_for("sendMessage", 3)
            assert sent[2]["text"] == "Deployed to production."
            results = [m["content"] for m in model_server.requests[1]["messages"][-2:]]
            assert json.loads(results[0])["answer"] == "production"
            assert results[1] == "exit code 0\nran\n"
            time.sleep(1)
            assert len(telegram.called("sendMessage")) == 3
            assert len(model_server.requests) == 2
        finally:
            gateway.stop()
