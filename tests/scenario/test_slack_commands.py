"""Slack's slash commands end to end (real slack-bolt and slack_sdk in a gateway process,
the fake Slack): each registry command's own slash command; an answer only the caller
should see arrives as ``chat.postEphemeral`` to them, others in the channel; the buttons
of an ephemeral ``jobs`` listing work, and redraw it through its response_url."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import BOT_USER, TEAM, FakeSlack, signed_headers
from tests.scenario.test_tool_crashes import tool_call

pytestmark = pytest.mark.any_database

CHANNEL = "C0GENERAL"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    """The fake Slack Web API."""
    with FakeSlack() as server:
        yield server


@pytest.fixture
def gateway(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A gateway with Slack configured, open to everyone in the test workspace."""
    process = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **slack.settings(),
        **model_server.settings(),
    )
    process.start()
    yield process
    process.stop()


def post(gateway: GatewayProcess, body: str, content_type: str) -> int:
    """A signed request to /slack/events; its status."""
    headers = {"Content-Type": content_type, **signed_headers(body)}
    return http("POST", f"{gateway.url}/slack/events", raw=body.encode(), headers=headers)[0]


def slash(
    gateway: GatewayProcess,
    command: str,
    text: str = "",
    *,
    user: str = "U0ALICE",
    response_url: str = "http://127.0.0.1:9/unused",
) -> int:
    """A slash command as Slack sends it (a form)."""
    form = {
        "token": "unused",
        "team_id": TEAM,
        "team_domain": "test",
        "channel_id": CHANNEL,
        "channel_name": "general",
        "user_id": user,
        "user_name": user.lower(),
        "command": command,
        "text": text,
        "api_app_id": "A0CHATGATE",
        "response_url": response_url,
        "trigger_id": f"{time.time_ns()}.1.abc",
    }
    return post(gateway, urlencode(form), "application/x-www-form-urlencoded")


def mention(text: str, *, ts: str, user: str = "U0ALICE") -> str:
    """An app_mention event_callback, as JSON."""
    return json.dumps(
        {
            "team_id": TEAM,
            "api_app_id": "A0CHATGATE",
            "type": "event_callback",
            "event_id": f"Ev{ts}",
            "event_time": int(time.time()),
            "event": {
                "type": "app_mention",
                "user": user,
                "text": f"<@{BOT_USER}> {text}",
                "ts": ts,
                "channel": CHANNEL,
                "event_ts": ts,
            },
        }
    )


def press_ephemeral(
    gateway: GatewayProcess, button: dict[str, Any], *, user: str, response_url: str
) -> int:
    """A press on an ephemeral message: no ``message``, the container says so."""
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM, "domain": "test"},
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "channel": {"id": CHANNEL, "name": "general"},
        "container": {
            "type": "message",
            "message_ts": "1800000009.000000",
            "channel_id": CHANNEL,
            "is_ephemeral": True,
        },
        "trigger_id": "1.2.3",
        "response_url": response_url,
        "actions": [
            {
                "action_id": button["action_id"],
                "block_id": "whatever",
                "value": button["value"],
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)})
    return post(gateway, body, "application/x-www-form-urlencoded")


def blocks_of(call: dict[str, Any]) -> list[dict[str, Any]]:
    """A call's blocks (slack_sdk sends JSON or, in a form, a JSON string)."""
    blocks = call.get("blocks") or []
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def buttons(call: dict[str, Any]) -> list[dict[str, Any]]:
    """Every button in a message's or view's blocks."""
    found = []
    for block in blocks_of(call):
        found += [e for e in block.get("elements", []) if e.get("type") == "button"]
        if block.get("accessory", {}).get("type") == "button":
            found.append(block["accessory"])
    return found


def test_private_answers_are_ephemeral_to_the_caller_and_others_are_posted(
    gateway: GatewayProcess, slack: FakeSlack, model_server: FakeModelServer
) -> None:
    """``/usage`` and ``/chatgate help`` (answer: private) arrive as chat.postEphemeral to
    the person who typed them; ``/cancel`` (answer: here) is posted in the channel; a slash
    command the registry does not know is answered with the help."""
    assert slash(gateway, "/usage") == 200
    [usage] = slack.wait_for("chat.postEphemeral", 1)
    assert (usage["channel"], usage["user"]) == (CHANNEL, "U0ALICE")
    assert "This conversation so far" in usage["text"]
    assert slash(gateway, "/chatgate", "help", user="U0BOB") == 200
    helped = slack.wait_for("chat.postEphemeral", 2)[1]
    assert helped["user"] == "U0BOB"
    assert "/jobs" in helped["text"]
    assert slack.posted() == []
    assert slash(gateway, "/cancel", "sc_00000000") == 200
    [here] = slack.wait_for("chat.postMessage", 1)
    assert here["channel"] == CHANNEL
    assert "Could not cancel" in here["text"]
    assert slash(gateway, "/frobnicate", "now") == 200
    unknown = slack.wait_for("chat.postEphemeral", 3)[2]
    assert "Commands:" in unknown["text"]
    assert "slack slash command not in the registry" in gateway.log
    assert len(slack.posted("chat.postEphemeral")) == 3
    assert model_server.requests == []


def test_an_ephemeral_jobs_listing_has_buttons_that_work_once_and_redraw_it(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    """``/jobs`` is only for the caller: an ephemeral listing with Pause / Delete. Someone
    else's press is refused in private; the creator's pauses the schedule once and
    redraws the listing through the response_url (Resume now), never chat.update."""
    model_server.script(
        tool_call("schedule_task", {"prompt": "report", "schedule": "0 9 * * 1-5"}), "Scheduled."
    )
    assert (
        post(gateway, mention("every weekday at 9", ts="1700000800.000100"), "application/json")
        == 200
    )
    slack.wait_for("chat.postMessage", 1)
    assert slash(gateway, "/jobs") == 200
    [listing] = slack.wait_for("chat.postEphemeral", 1)
    assert listing["user"] == "U0ALICE"
    assert [b["text"]["text"] for b in buttons(listing)] == ["Pause", "Delete"]
    pause = buttons(listing)[0]
    url = slack.response_url("jobs")
    assert press_ephemeral(gateway, pause, user="U0MALLORY", response_url=url) == 200
    refusal = slack.wait_for("chat.postEphemeral", 2)[1]
    assert refusal["user"] == "U0MALLORY"
    assert "only slack:U0ALICE" in refusal["text"]
    assert press_ephemeral(gateway, pause, user="U0ALICE", response_url=url) == 200
    [redrawn] = slack.wait_for("response_url", 1)
    assert redrawn["replace_original"] is True
    assert [b["text"]["text"] for b in buttons(redrawn)] == ["Resume", "Delete"]
    assert "*paused*" in json.dumps(redrawn["blocks"])
    # The stale Pause pressed again changes nothing: still paused, redrawn the same.
    assert press_ephemeral(gateway, pause, user="U0ALICE", response_url=url) == 200
    again = slack.wait_for("response_url", 2)[1]
    assert [b["text"]["text"] for b in buttons(again)] == ["Resume", "Delete"]
    assert slack.posted("chat.update") == []
    assert len(model_server.requests) == 2


def test_forget_me_asked_in_a_channel_is_ephemeral_and_answered_through_its_response_url(
    gateway: GatewayProcess, slack: FakeSlack
) -> None:
    """``/forget`` (no words needed) asks only the caller, with Erase / Keep; Keep edits the
    ephemeral question into "Kept" through the press's response_url."""
    assert slash(gateway, "/forget") == 200
    [question] = slack.wait_for("chat.postEphemeral", 1)
    assert [b["text"]["text"] for b in buttons(question)] == ["Erase my data", "Keep it"]
    keep = buttons(question)[1]
    url = slack.response_url("forget")
    assert press_ephemeral(gateway, keep, user="U0ALICE", response_url=url) == 200
    [kept] = slack.wait_for("response_url", 1)
    assert kept["text"] == "Kept: nothing was erased."
    assert slack.posted() == []


def test_a_response_url_that_is_not_slacks_is_never_followed(
    gateway: GatewayProcess, slack: FakeSlack
) -> None:
    """A press (signed, or relayed by Socket Mode) naming another host's URL: chatgate
    posts nothing there; the same press with Slack's URL redraws as usual."""
    from tests.fakes.http_echo import EchoServer

    assert slash(gateway, "/forget") == 200
    [question] = slack.wait_for("chat.postEphemeral", 1)
    keep = buttons(question)[1]
    with EchoServer() as elsewhere:
        url = f"http://{elsewhere.host}/internal-admin?delete=all"
        assert press_ephemeral(gateway, keep, user="U0ALICE", response_url=url) == 200
        time.sleep(1)
        assert elsewhere.requests == []
    assert slack.called("response_url") == []


def test_malformed_slash_commands_and_presses_are_400_not_500(gateway: GatewayProcess) -> None:
    form = "application/x-www-form-urlencoded"
    assert post(gateway, urlencode({"command": "/jobs", "team_id": TEAM}), form) == 400
    for payload in (
        {"type": "block_actions", "actions": "x", "user": {"id": "U1"}},
        {"type": "block_actions", "actions": [{"action_id": "chatgate_job_pause"}], "user": 5},
        {
            "type": "block_actions",
            "container": {"type": "view"},
            "user": {"id": "U1"},
            "team": None,
            "actions": [{"action_id": "chatgate_home_forget", "value": "C1"}],
        },
        {
            "type": "block_actions",
            "user": {"id": "U1"},
            "team": {"id": TEAM},
            "channel": {"id": CHANNEL},
            "message": "not an object",
            "actions": [{"action_id": "chatgate_job_pause", "value": "sc_1"}],
        },
        [1, 2],
        {"type": "block_actions", "user": {"id": "U1"}, "team": {"id": TEAM}, "actions": [{}]},
    ):
        body = urlencode({"payload": json.dumps(payload)})
        assert post(gateway, body, form) == 400, payload
    for event in (
        {"type": "app_home_opened"},
        {"type": "app_home_opened", "user": "", "tab": "home"},
        {"type": "app_home_opened", "user": "U1", "channel": 5, "tab": "home"},
    ):
        home = json.dumps({"type": "event_callback", "team_id": TEAM, "event": event})
        assert post(gateway, home, "application/json") == 400, event
