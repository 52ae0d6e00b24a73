"""Slack's App Home end to end (real slack-bolt and slack_sdk in a gateway process, the
fake Slack, an echo server counting the tool's requests): published on
``app_home_opened`` with the person's schedules and the approval waiting for them;
Approve pressed there runs the call once and the reply lands in the original thread;
the Home is redrawn after each press; "Forget me" asks in the DM; opening the Messages tab
offers the configured suggested prompts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.fakes.gateway import GatewayProcess
from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import TEAM, FakeSlack
from tests.scenario.test_slack_commands import buttons, mention, post
from tests.scenario.test_tool_crashes import tool_call

# Also the PostgreSQL pass: the Home reads (agent_core.storage.home) are SQL of their own.

DM = "D0ALICE"
SCHEDULED_AT = "1700001000.000100"
ASKED_AT = "1700001100.000100"
PROMPTS = [
    ("My schedules", "What do I have scheduled?"),
    ("Summarize", "Summarize this week's incidents"),
]


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    """Where the approved call goes (it counts the requests)."""
    with EchoServer() as server:
        yield server


@pytest.fixture
def gateway(
    database_url: str,
    model_server: FakeModelServer,
    echo: EchoServer,
    tmp_path: Path,
) -> Iterator[tuple[GatewayProcess, FakeSlack]]:
    """A Slack gateway where http_request may reach the echo server (a POST asks)."""
    (tmp_path / "chatgate.toml").write_text(
        "".join(
            f'[[slack_suggested_prompts]]\ntitle = "{title}"\nmessage = "{message}"\n'
            for title, message in PROMPTS
        )
        + f'[tools.http_request]\nallowed_hosts = ["{echo.entry}"]\n'
    )
    with FakeSlack() as slack:
        process = GatewayProcess(
            database_url=database_url,
            workdir=tmp_path,
            CHATGATE_ACCESS="open",
            CHATGATE_STATE_DIR=str(tmp_path / "state"),
            CHATGATE_CONFIG=str(tmp_path / "chatgate.toml"),
            **slack.settings(),
            **model_server.settings(),
        )
        process.start()
        try:
            yield process, slack
        finally:
            process.stop()


def home_opened(gateway: GatewayProcess, *, user: str = "U0ALICE", tab: str = "home") -> int:
    """``app_home_opened`` as Slack sends it (the DM with the app is its channel)."""
    body = {
        "team_id": TEAM,
        "api_app_id": "A0CHATGATE",
        "type": "event_callback",
        "event_id": f"EvHome{time.time_ns()}",
        "event_time": int(time.time()),
        "event": {
            "type": "app_home_opened",
            "user": user,
            "channel": DM,
            "tab": tab,
            "event_ts": f"{time.time():.6f}",
        },
    }
    return post(gateway, json.dumps(body), "application/json")


def press_in_home(
    gateway: GatewayProcess, view: dict[str, Any], button: dict[str, Any], *, user: str
) -> int:
    """A press in the App Home: the container is the view, there is no channel."""
    block_id = next(
        b.get("block_id", "forget")
        for b in view["blocks"]
        if button in b.get("elements", []) or b.get("accessory") == button
    )
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "api_app_id": "A0CHATGATE",
        "container": {"type": "view", "view_id": "V0HOME"},
        "trigger_id": "1.2.3",
        "team": {"id": TEAM, "domain": "test"},
        "view": {**view, "id": "V0HOME"},
        "actions": [
            {
                "action_id": button["action_id"],
                "block_id": block_id,
                "value": button["value"],
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)})
    return post(gateway, body, "application/x-www-form-urlencoded")


def published(slack: FakeSlack, count: int) -> dict[str, Any]:
    """The ``count``th view published (waiting for it)."""
    call = slack.wait_for("views.publish", count)[count - 1]
    view = call["view"]
    return json.loads(view) if isinstance(view, str) else dict(view)


def labelled(view: dict[str, Any], label: str) -> list[dict[str, Any]]:
    return [b for b in buttons(view) if b["text"]["text"] == label]


def test_the_home_shows_schedules_and_the_approval_and_approve_there_runs_it_once(
    gateway: tuple[GatewayProcess, FakeSlack],
    model_server: FakeModelServer,
    echo: EchoServer,
) -> None:
    process, slack = gateway
    model_server.script(
        tool_call("schedule_task", {"prompt": "report", "schedule": "0 9 * * 1-5"}),
        "Scheduled.",
        tool_call("http_request", {"method": "POST", "url": f"http://{echo.host}/hook"}),
        "Posted it.",
    )
    assert post(process, mention("every weekday at 9", ts=SCHEDULED_AT), "application/json") == 200
    slack.wait_for("chat.postMessage", 1)
    assert post(process, mention("post to the hook", ts=ASKED_AT), "application/json") == 200
    prompt = slack.wait_for("chat.postMessage", 2)[1]
    assert prompt["thread_ts"] == ASKED_AT
    approval_id = buttons(prompt)[0]["value"]

    # The Messages tab publishes nothing; the Home tab does.
    assert home_opened(process, tab="messages") == 200
    assert home_opened(process) == 200
    home = published(slack, 1)
    [call] = slack.called("views.publish")
    assert call["user_id"] == "U0ALICE"
    shown = json.dumps(home)
    assert "every weekday" in shown or "0 9 * * 1-5" in shown
    assert "next run" in shown
    assert "http_request" in shown
    assert "Your usage this month" in shown
    [approve] = labelled(home, "Approve")
    assert approve["value"] == approval_id
    assert labelled(home, "Pause")
    [forget] = labelled(home, "Forget me")
    assert forget["value"] == DM

    # Someone else's Home shows none of it.
    assert home_opened(process, user="U0BOB") == 200
    bob = published(slack, 2)
    assert approval_id not in json.dumps(bob)
    assert labelled(bob, "Pause") == []

    # Approve in the Home: the call runs once, the prompt says who, the reply lands in the
    # thread it was asked in, and the Home is redrawn without the approval.
    assert press_in_home(process, home, approve, user="U0ALICE") == 200
    [update] = slack.wait_for("chat.update", 1)
    assert update["text"] == "slack:U0ALICE approved http_request"
    reply = slack.wait_for("chat.postMessage", 3)[2]
    assert (reply["text"], reply["thread_ts"]) == ("Posted it.", ASKED_AT)
    assert len(echo.requests) == 1
    redrawn = published(slack, 3)
    assert approval_id not in json.dumps(redrawn)
    assert "Nothing is waiting for you" in json.dumps(redrawn)

    # The stale button pressed again: nothing runs, the Home says why.
    assert press_in_home(process, home, approve, user="U0ALICE") == 200
    again = published(slack, 4)
    assert "already decided" in json.dumps(again)
    time.sleep(0.5)
    assert len(echo.requests) == 1
    assert len(slack.posted("chat.update")) == 1

    # Pause a schedule from the Home: redrawn with Resume.
    [pause] = labelled(home, "Pause")
    assert press_in_home(process, home, pause, user="U0ALICE") == 200
    paused = published(slack, 5)
    assert labelled(paused, "Resume")
    assert labelled(paused, "Pause") == []
    assert "*paused*" in json.dumps(paused)
    assert len(model_server.requests) == 4


def test_forget_me_in_the_home_asks_in_the_dm(gateway: tuple[GatewayProcess, FakeSlack]) -> None:
    """The Home's "Forget me" posts the usual question (Erase / Keep) in the person's DM
    with the app; nothing is erased until they answer there."""
    process, slack = gateway
    assert home_opened(process) == 200
    home = published(slack, 1)
    [forget] = labelled(home, "Forget me")
    assert press_in_home(process, home, forget, user="U0ALICE") == 200
    [question] = slack.wait_for("chat.postMessage", 1)
    assert question["channel"] == DM
    assert [b["text"]["text"] for b in buttons(question)] == ["Erase my data", "Keep it"]
    assert slack.posted("chat.postEphemeral") == []


def test_opening_the_messages_tab_offers_the_suggested_prompts(
    gateway: tuple[GatewayProcess, FakeSlack],
) -> None:
    """The agent messaging experience starts a chat when the person opens the Messages tab
    (``app_home_opened`` with ``tab: messages``): the prompts of chatgate.toml are set on
    their DM, without a thread_ts (an agent app's call with one does nothing). The Home
    tab publishes the Home and sets no prompts."""
    process, slack = gateway
    assert home_opened(process, tab="messages") == 200
    [call] = slack.wait_for("assistant.threads.setSuggestedPrompts", 1)
    assert call["channel_id"] == DM
    assert "thread_ts" not in call
    assert [(p["title"], p["message"]) for p in call["prompts"]] == PROMPTS
    assert slack.called("views.publish") == []
    assert home_opened(process, tab="home") == 200
    published(slack, 1)
    time.sleep(0.5)
    assert len(slack.called("assistant.threads.setSuggestedPrompts")) == 1


def test_a_members_role_reaches_prompts_they_see_not_every_home(
    database_url: str, model_server: FakeModelServer, echo: EchoServer, tmp_path: Path
) -> None:
    """With ``approvers = ["role:member"]``, Bob may decide Alice's approval where he sees
    its prompt, but it is not listed in his Home (it may hold what Alice asked in her DM),
    and a press of it from a Home is refused: nothing runs until Alice approves."""
    config = tmp_path / "chatgate.toml"
    config.write_text(
        f'[tools.http_request]\nallowed_hosts = ["{echo.entry}"]\n'
        '[[policy]]\ntool = "http_request"\ndecision = "ask"\napprovers = ["role:member"]\n'
    )
    model_server.script(
        tool_call("http_request", {"method": "POST", "url": f"http://{echo.host}/private",
                                   "body": "ALICE-SECRET"}),
        "Posted it.",
    )  # fmt: skip
    with FakeSlack() as slack:
        process = GatewayProcess(
            database_url=database_url,
            workdir=tmp_path,
            CHATGATE_ACCESS="open",
            CHATGATE_STATE_DIR=str(tmp_path / "state"),
            CHATGATE_CONFIG=str(config),
            **slack.settings(),
            **model_server.settings(),
        )
        process.start()
        try:
            assert post(process, mention("post it", ts=ASKED_AT), "application/json") == 200
            prompt = slack.wait_for("chat.postMessage", 1)[0]
            approval_id = buttons(prompt)[0]["value"]
            assert home_opened(process) == 200
            alice = published(slack, 1)
            [approve] = labelled(alice, "Approve")
            assert home_opened(process, user="U0BOB") == 200
            bob = published(slack, 2)
            assert approval_id not in json.dumps(bob)
            assert "ALICE-SECRET" not in json.dumps(bob)
            # Bob replays Alice's Home button from his own Home: refused, nothing runs.
            assert press_in_home(process, alice, approve, user="U0BOB") == 200
            refused = published(slack, 3)
            assert f"You may not decide {approval_id}" in json.dumps(refused)
            time.sleep(0.5)
            assert echo.requests == []
            assert press_in_home(process, alice, approve, user="U0ALICE") == 200
            reply = slack.wait_for("chat.postMessage", 2)[1]
            assert reply["text"] == "Posted it."
            assert len(echo.requests) == 1
        finally:
            process.stop()
