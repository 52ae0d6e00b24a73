"""Approval routing (issue #29): a ``[[policy]]`` rule's ``route`` sends the prompt to the
approvers' DMs, and its ``escalate_to`` passes a prompt nobody decided on in time to
someone else. The real SDKs in a ``chatgate gateway`` against the fake platforms; the
command runs in the sandbox, and a file it appends to counts its runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fakes.discord_server import CHANNEL as DISCORD_CHANNEL
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.gateway import CHATGATE
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import FakeSlack, posted_ts
from tests.fakes.telegram_server import BOT_USERNAME, FakeTelegram
from tests.scenario.test_approvals_api import tool_call
from tests.scenario.test_discord import ALICE as DISCORD_ALICE
from tests.scenario.test_discord import _wait_created
from tests.scenario.test_questions_platforms import platform_gateway
from tests.scenario.test_slack import CHANNEL, _mention, _post_event, _press
from tests.scenario.test_telegram import ALICE, GROUP, _callback, _post, _text
from tests.scenario.test_telegram import _gateway as telegram_gateway

pytestmark = pytest.mark.any_database

COMMAND = {"command": "echo ran >> runs; cat runs"}


def _policy(tmp_path: Path, rule: str) -> str:
    path = tmp_path / "chatgate.toml"
    path.write_text(f'[[policy]]\ntool = "run_command"\ndecision = "ask"\n{rule}')
    return str(path)


def test_slack_route_approvers_asks_in_the_approvers_dm_and_the_turn_finishes_here(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """``route = "approvers"``: Bob gets the prompt in his DM, saying where it was asked;
    the thread sees "waiting for approval by slack:U0BOB" and no buttons. Bob approves in
    his DM: the command runs once, the reply lands in the thread, and both the DM copy and
    the thread's note show the decision."""
    config = _policy(
        tmp_path, 'approvers = ["slack:U0BOB"]\nroute = "approvers"\nself_approve = false\n'
    )
    model_server.script(tool_call("run_command", COMMAND), "Ran it.")
    with FakeSlack() as slack:
        gateway = platform_gateway(
            database_url, model_server, tmp_path, slack.settings(), CHATGATE_CONFIG=config
        )
        gateway.start()
        try:
            thread = "1700000100.000100"
            assert _post_event(gateway, _mention("run it", ts=thread))[0] == 200
            dm, note = slack.wait_for("chat.postMessage", 2)
            assert [call for method, call in slack.calls if method == "conversations.open"] == [
                {"users": "U0BOB"}
            ]
            assert dm["channel"] == "DU0BOB"
            blocks = dm["blocks"] if isinstance(dm["blocks"], list) else json.loads(dm["blocks"])
            assert f"Asked in <#{CHANNEL}>" in blocks[0]["text"]["text"]
            approval_id = blocks[-1]["elements"][0]["value"]
            assert (note["channel"], note["thread_ts"]) == (CHANNEL, thread)
            assert note["text"].startswith("Waiting for approval of run_command by slack:U0BOB")
            assert "blocks" not in note or not note["blocks"]
            assert len(model_server.requests) == 1
            status = _press(
                gateway,
                approval_id,
                user="U0BOB",
                message_ts=posted_ts(1),
                channel="DU0BOB",
                thread=None,
            )
            assert status == 200
            updates = slack.wait_for("chat.update", 2)
            assert {(u["channel"], u["ts"]) for u in updates} == {
                ("DU0BOB", posted_ts(1)),
                (CHANNEL, posted_ts(2)),
            }
            assert all(u["text"] == "slack:U0BOB approved run_command" for u in updates)
            posts = slack.wait_for("chat.postMessage", 3)
            assert (posts[2]["channel"], posts[2]["thread_ts"]) == (CHANNEL, thread)
            assert posts[2]["text"] == "Ran it."
            assert model_server.requests[1]["messages"][-1]["content"] == "exit code 0\nran\n"
            time.sleep(1)
            assert len(model_server.requests) == 2
            assert len(slack.posted("chat.postMessage")) == 3
        finally:
            gateway.stop()


def test_telegram_escalate_to_passes_an_undecided_prompt_on_to_a_private_chat(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """``timeout`` with ``escalate_to``: nobody decides in the group within the timeout,
    so the prompt goes to the named person's private chat and the group is told; their
    press there runs the command once, and both copies show the decision."""
    lead = 4440000
    config = _policy(tmp_path, f'timeout = 0.03\nescalate_to = ["telegram:{lead}"]\n')
    model_server.script(tool_call("run_command", COMMAND), "Ran it.")
    with FakeTelegram() as telegram:
        gateway = telegram_gateway(
            database_url,
            model_server,
            telegram,
            tmp_path,
            CHATGATE_CONFIG=config,
            CHATGATE_LEASE_SECONDS="2",
        )
        gateway.start()
        try:
            assert _post(gateway, _text(f"@{BOT_USERNAME} run it", chat=GROUP)) == 200
            [prompt] = telegram.wait_for("sendMessage", 1, timeout=30)
            assert str(prompt["chat_id"]) == str(GROUP)
            sent = telegram.wait_for("sendMessage", 3, timeout=30)
            passed = next(s for s in sent[1:] if str(s["chat_id"]) == str(lead))
            told = next(s for s in sent[1:] if str(s["chat_id"]) == str(GROUP))
            assert f"passed on to telegram:{lead}" in told["text"]
            assert f"Asked by telegram:{ALICE} in chat {GROUP}" in passed["text"]
            approve = passed["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
            shown = next(m for m in telegram.delivered if str(m["chat"]["id"]) == str(lead))
            assert len(model_server.requests) == 1
            assert _post(gateway, _callback(approve, user=lead, message=shown)) == 200
            edits = telegram.wait_for("editMessageText", 2)
            assert {str(e["chat_id"]) for e in edits} == {str(GROUP), str(lead)}
            assert all(f"telegram:{lead} approved run_command" in e["text"] for e in edits)
            replies = telegram.wait_for("sendMessage", 4)
            assert replies[3]["text"] == "Ran it."
            assert model_server.requests[1]["messages"][-1]["content"] == "exit code 0\nran\n"
            time.sleep(1)
            assert len(model_server.requests) == 2
            assert len(telegram.called("sendMessage")) == 4
        finally:
            gateway.stop()


def test_discord_route_both_shows_the_prompt_here_and_in_the_approvers_dm(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """``route = "both"``: the prompt shows in the channel and in the approver's DM; the
    approver's press in the DM decides it, and the channel's prompt loses its buttons."""
    bob = "308888888888888888"
    config = _policy(tmp_path, f'approvers = ["discord:{bob}"]\nroute = "both"\n')
    model_server.script(tool_call("run_command", COMMAND), "Ran it.")
    with FakeDiscord() as discord:
        gateway = platform_gateway(
            database_url, model_server, tmp_path, discord.settings(), CHATGATE_CONFIG=config
        )
        gateway.start()
        discord.wait_connected()
        try:
            discord.message_create("run it", mention=True)
            copy, here = _wait_created(discord, 2)
            assert copy["channel_id"] == discord.dm_channels[bob]
            assert f"Asked by <@{DISCORD_ALICE}> in <#{DISCORD_CHANNEL}>" in copy["content"]
            assert here["channel_id"] == DISCORD_CHANNEL
            approve = copy["components"][0]["components"][0]["custom_id"]
            assert here["components"][0]["components"][0]["custom_id"] == approve
            discord.press(copy, approve, presser=bob)
            here_edit = f"PATCH channels/{DISCORD_CHANNEL}/messages/{here['id']}"
            [edit] = discord.wait_for(here_edit, 1)
            assert f"discord:{bob} approved run_command" in edit["content"]
            assert edit["components"] == []
            copy_edit = f"PATCH channels/{copy['channel_id']}/messages/{copy['id']}"
            [edit] = discord.wait_for(copy_edit, 1)
            assert edit["components"] == []
            replies = _wait_created(discord, 3)
            assert replies[2]["content"] == "Ran it."
            time.sleep(1)
            assert len(model_server.requests) == 2
            assert len(discord.created) == 3
        finally:
            gateway.stop()


def test_a_route_to_approvers_without_people_to_reach_is_refused_at_start(
    tmp_path: Path,
) -> None:
    """``route = "approvers"`` with only roles as approvers reaches nobody: the settings
    are refused (exit 2), naming the setting."""
    config = _policy(tmp_path, 'approvers = ["role:admin"]\nroute = "approvers"\n')
    import subprocess

    done = subprocess.run(
        [CHATGATE, "doctor"],
        env={"CHATGATE_CONFIG": config, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "route" in done.stderr
