"""Slack end to end: the real slack-bolt and slack_sdk in a ``chatgate gateway`` process,
signed requests in, a fake Slack Web API on 127.0.0.1 out, the real litellm against the
fake model."""

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
from tests.fakes.slack_server import (
    APP_TOKEN,
    BOT_USER,
    TEAM,
    FakeSlack,
    posted_ts,
    signed_headers,
)
from tests.scenario.test_forget import columns_holding
from tests.scenario.test_tool_crashes import tool_call

# About the adapters, not the storage: the SQLite pass runs it (tests/conftest.py).
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


def _mention(
    text: str, *, ts: str, user: str = "U0ALICE", event_id: str = "Ev0001"
) -> dict[str, Any]:
    return {
        "token": "unused",
        "team_id": TEAM,
        "api_app_id": "A0CHATGATE",
        "type": "event_callback",
        "event_id": event_id,
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


def _post_event(
    gateway: GatewayProcess, payload: dict[str, Any], *, retry: int | None = None, **sign: Any
) -> tuple[int, Any]:
    body = json.dumps(payload)
    headers = {"Content-Type": "application/json", **signed_headers(body, **sign)}
    if retry is not None:
        headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
    return http("POST", f"{gateway.url}/slack/events", raw=body.encode(), headers=headers)


def _press(
    gateway: GatewayProcess,
    approval_id: str,
    *,
    user: str,
    message_ts: str,
    action_id: str = "chatgate_approve",
    channel: str = CHANNEL,
    thread: str | None = "1700000100.000100",
) -> int:
    """A press of one of our buttons (Approve by default; ``approval_id`` is its value)
    on the message ``message_ts`` in ``channel`` (in ``thread``, if any)."""
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    message: dict[str, Any] = {"type": "message", "ts": message_ts}
    if thread is not None:
        container["thread_ts"] = message["thread_ts"] = thread
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM, "domain": "test"},
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "api_app_id": "A0CHATGATE",
        "container": container,
        "trigger_id": "1.2.3",
        "channel": {"id": channel, "name": "general"},
        "message": message,
        "response_url": "http://127.0.0.1:9/unused",
        "actions": [
            {
                "action_id": action_id,
                "block_id": f"approval:{approval_id}",
                "value": approval_id,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)})
    headers = {"Content-Type": "application/x-www-form-urlencoded", **signed_headers(body)}
    status, _ = http("POST", f"{gateway.url}/slack/events", raw=body.encode(), headers=headers)
    return status


def test_url_verification_is_answered(gateway: GatewayProcess) -> None:
    status, body = _post_event(
        gateway, {"type": "url_verification", "token": "t", "challenge": "ch4ll3nge"}
    )
    assert (status, body) == (200, {"challenge": "ch4ll3nge"})


def test_a_mention_is_answered_in_its_thread_once_despite_retries(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    model_server.script("Hello from the agent")
    payload = _mention("are you there?", ts="1700000100.000100")
    assert _post_event(gateway, payload)[0] == 200
    assert _post_event(gateway, payload, retry=1)[0] == 200
    assert _post_event(gateway, payload, retry=2)[0] == 200
    [post] = slack.wait_for("chat.postMessage", 1)
    assert post["channel"] == CHANNEL
    assert post["thread_ts"] == "1700000100.000100"
    assert post["text"] == "Hello from the agent"
    time.sleep(1.5)
    assert len(slack.posted()) == 1
    assert len(model_server.requests) == 1
    assert model_server.user_texts() == ["are you there?"]


def test_a_message_waits_for_the_bots_identity_and_the_bots_own_are_not_answered(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    """Message events skip bolt: while ``auth.test`` fails the gateway cannot tell the
    bot's own messages apart, so it answers 500 and stores nothing (Slack delivers again);
    the bot's own messages and other bots' are dropped as bolt would."""
    model_server.script("Hello from the agent")
    slack.fail_auth_test = 1
    payload = _mention("who are you?", ts="1700000150.000100")
    assert _post_event(gateway, payload)[0] == 500
    assert _post_event(gateway, payload, retry=1)[0] == 200
    [post] = slack.wait_for("chat.postMessage", 1)
    assert post["thread_ts"] == "1700000150.000100"
    own = _mention("an echo", ts="1700000151.000100", user=BOT_USER, event_id="Ev0002")
    own["event"] |= {"type": "message", "thread_ts": "1700000150.000100"}
    other_bot = _mention("a bot", ts="1700000152.000100", event_id="Ev0003")
    other_bot["event"] |= {"bot_id": "B0OTHER"}
    assert _post_event(gateway, own)[0] == 200
    assert _post_event(gateway, other_bot)[0] == 200
    time.sleep(1.5)
    assert len(slack.posted()) == 1
    assert model_server.user_texts() == ["who are you?"]
    assert [m for m, _ in slack.calls].count("auth.test") >= 2


def test_bad_and_stale_signatures_are_refused_and_nothing_runs(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    payload = _mention("hello", ts="1700000200.000100")
    assert _post_event(gateway, payload, secret="wrong-secret")[0] == 401
    assert _post_event(gateway, payload, at=time.time() - 6 * 60)[0] == 401
    time.sleep(1)
    assert model_server.requests == []
    assert slack.posted() == []


def test_an_approval_is_pressed_in_slack_and_the_tool_runs_once(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    model_server.script(
        tool_call("run_command", {"command": "echo from-slack"}), "The command said from-slack."
    )
    assert _post_event(gateway, _mention("run the echo", ts="1700000100.000100"))[0] == 200
    [prompt] = slack.wait_for("chat.postMessage", 1)
    assert prompt["thread_ts"] == "1700000100.000100"
    blocks = (
        prompt["blocks"] if isinstance(prompt["blocks"], list) else json.loads(prompt["blocks"])
    )
    buttons = blocks[1]["elements"]
    assert [b["text"]["text"] for b in buttons] == ["Approve", "Allow in this conversation", "Deny"]
    approval_id = buttons[0]["value"]
    assert approval_id.startswith("ap_")
    # Someone else presses first: a private refusal, nothing runs.
    assert _press(gateway, approval_id, user="U0MALLORY", message_ts=prompt_ts(slack)) == 200
    [refusal] = slack.wait_for("chat.postEphemeral", 1)
    assert refusal["user"] == "U0MALLORY"
    assert "may not decide" in refusal["text"]
    assert len(model_server.requests) == 1
    # The requester approves: the prompt is updated, the command runs, the answer follows.
    assert _press(gateway, approval_id, user="U0ALICE", message_ts=prompt_ts(slack)) == 200
    [update] = slack.wait_for("chat.update", 1)
    assert update["ts"] == prompt_ts(slack)
    assert update["text"] == "slack:U0ALICE approved run_command"
    posts = slack.wait_for("chat.postMessage", 2)
    assert posts[1]["text"] == "The command said from-slack."
    assert "from-slack" in model_server.requests[1]["messages"][-1]["content"]
    # A double press changes nothing more.
    assert _press(gateway, approval_id, user="U0ALICE", message_ts=prompt_ts(slack)) == 200
    time.sleep(1)
    assert len(slack.posted("chat.update")) == 1
    assert len(model_server.requests) == 2


def prompt_ts(slack: FakeSlack) -> str:
    """The ts the fake gave the first posted message (the prompt)."""
    return posted_ts(1)


def test_a_rate_limited_reply_still_arrives(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    model_server.script("after the rate limit")
    slack.rate_limit_next = 1
    assert _post_event(gateway, _mention("hi", ts="1700000300.000100"))[0] == 200
    [post] = slack.wait_for("chat.postMessage", 1, timeout=30)
    assert post["text"] == "after the rate limit"
    assert [name for name, _ in slack.calls].count("ratelimited") == 1


def _socket_mode(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> GatewayProcess:
    """A gateway (not started) on Socket Mode only: an app token, no signing secret."""
    settings = {k: v for k, v in slack.settings().items() if k != "SLACK_SIGNING_SECRET"}
    return GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        SLACK_APP_TOKEN=APP_TOKEN,
        **settings,
        **model_server.settings(),
    )


def test_socket_mode_answers_a_mention_like_the_events_api(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """With SLACK_APP_TOKEN and no signing secret: the gateway opens the socket
    (apps.connections.open), acks each envelope, answers in the thread; a redelivery
    (retry_attempt) is one turn; the HTTP route stays closed."""
    process = _socket_mode(database_url, model_server, slack, tmp_path)
    model_server.script("over the socket")
    process.start()
    try:
        deadline = time.monotonic() + 20
        while slack.connections == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slack.connections == 1, process.log
        payload = _mention("hi socket", ts="1700000400.000100")
        for attempt, envelope_id in enumerate(("env-1", "env-2")):
            slack.push(
                {
                    "type": "events_api",
                    "envelope_id": envelope_id,
                    "accepts_response_payload": False,
                    "retry_attempt": attempt,
                    "retry_reason": "timeout" if attempt else "",
                    "payload": payload,
                }
            )
            slack.wait_for_ack(envelope_id)
        [post] = slack.wait_for("chat.postMessage", 1)
        assert post["thread_ts"] == "1700000400.000100"
        assert post["text"] == "over the socket"
        time.sleep(1)
        assert len(slack.posted()) == 1
        assert _post_event(process, payload)[0] == 404
    finally:
        process.stop()


def test_malformed_and_oversize_bodies_are_refused_without_a_500(
    gateway: GatewayProcess, model_server: FakeModelServer
) -> None:
    url = f"{gateway.url}/slack/events"
    garbage = "{not json"
    json_headers = {"Content-Type": "application/json"}
    assert (
        http("POST", url, raw=garbage.encode(), headers=json_headers | signed_headers(garbage))[0]
        == 400
    )
    assert http("POST", url, raw=garbage.encode(), headers=json_headers)[0] == 401
    body = json.dumps(_mention("hi", ts="1700000700.000100"))
    odd = json_headers | {"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"}
    assert http("POST", url, raw=body.encode(), headers=odd)[0] == 401
    big = json.dumps({"type": "event_callback", "pad": "x" * (1024 * 1024 + 10)})
    assert http("POST", url, raw=big.encode(), headers=json_headers | signed_headers(big))[0] == 413
    for event in ([], "app_mention", 7, None):
        odd_event = json.dumps({"type": "event_callback", "event_id": "Ev9", "event": event})
        signed = json_headers | signed_headers(odd_event)
        assert http("POST", url, raw=odd_event.encode(), headers=signed)[0] == 400, event
    assert model_server.requests == []


def test_a_thread_reply_continues_only_a_conversation_the_agent_is_in(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    model_server.script("first answer", "second answer")
    assert _post_event(gateway, _mention("start", ts="1700000500.000100"))[0] == 200
    slack.wait_for("chat.postMessage", 1)

    def reply(ts: str, thread: str) -> dict[str, Any]:
        payload = _mention("x", ts=ts, event_id=f"Ev{ts}")
        payload["event"] |= {
            "type": "message",
            "text": "and then?",
            "thread_ts": thread,
            "channel_type": "channel",
        }
        return payload

    assert _post_event(gateway, reply("1700000501.000100", "1700000500.000100"))[0] == 200
    assert _post_event(gateway, reply("1700000502.000100", "1699999999.000100"))[0] == 200
    posts = slack.wait_for("chat.postMessage", 2)
    assert posts[1]["thread_ts"] == "1700000500.000100"
    assert posts[1]["text"] == "second answer"
    time.sleep(1)
    assert len(slack.posted()) == 2  # the unknown thread was left alone
    assert len(model_server.requests) == 2


def test_a_long_reply_arrives_as_several_valid_messages(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    code = "\n".join(f"line_{i} = compute({i}) & check({i}) < {i * 2}" for i in range(120))
    parts = []
    for index in range(4):
        parts.append(f"Part {index}: " + "words " * 150)
        parts.append(f"```python\n{code}\n```")
    text = "\n\n".join(parts)
    assert len(text) > 10_000
    model_server.script(text)
    assert _post_event(gateway, _mention("explain", ts="1700000600.000100"))[0] == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(slack.posted()) < 4:
        time.sleep(0.1)
    time.sleep(1)
    posts = [p["text"] for p in slack.posted()]
    assert len(posts) >= 4
    for post in posts:
        assert len(post) <= 3900
        assert post.count("```") % 2 == 0, post[:200]
        assert "&lt;" in post or "Part" in post
        assert {p["thread_ts"] for p in slack.posted()} == {"1700000600.000100"}
    joined = "".join(posts)
    assert joined.count("line_119 = compute(119) &amp; check(119) &lt; 238") == 4


def _slash(
    gateway: GatewayProcess, text: str, *, user: str = "U0ALICE", channel: str = CHANNEL
) -> int:
    form = {
        "token": "unused",
        "team_id": TEAM,
        "team_domain": "test",
        "channel_id": channel,
        "channel_name": "general",
        "user_id": user,
        "user_name": user.lower(),
        "command": "/chatgate",
        "text": text,
        "api_app_id": "A0CHATGATE",
        "response_url": "http://127.0.0.1:9/unused",
        "trigger_id": f"{time.time_ns()}.1.abc",
    }
    body = urlencode(form)
    headers = {"Content-Type": "application/x-www-form-urlencoded", **signed_headers(body)}
    return http("POST", f"{gateway.url}/slack/events", raw=body.encode(), headers=headers)[0]


def _press_job(
    gateway: GatewayProcess,
    action_id: str,
    schedule_id: str,
    *,
    user: str,
    ts: str,
    channel: str = CHANNEL,
) -> int:
    payload = {
        "type": "block_actions",
        "team": {"id": TEAM, "domain": "test"},
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "channel": {"id": channel, "name": "general"},
        "container": {"type": "message", "message_ts": ts, "channel_id": channel},
        "message": {"type": "message", "ts": ts},
        "trigger_id": "1.2.3",
        "response_url": "http://127.0.0.1:9/unused",
        "actions": [
            {
                "action_id": action_id,
                "block_id": f"job:{schedule_id}",
                "value": schedule_id,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)})
    headers = {"Content-Type": "application/x-www-form-urlencoded", **signed_headers(body)}
    return http("POST", f"{gateway.url}/slack/events", raw=body.encode(), headers=headers)[0]


DM = "D0ALICE"


def _direct(text: str, *, ts: str, user: str = "U0ALICE") -> dict[str, Any]:
    """A message in the person's DM with the app."""
    return {
        "team_id": TEAM,
        "api_app_id": "A0CHATGATE",
        "type": "event_callback",
        "event_id": f"Ev{ts}",
        "event_time": int(time.time()),
        "event": {
            "type": "message",
            "channel_type": "im",
            "user": user,
            "text": text,
            "ts": ts,
            "channel": DM,
            "event_ts": ts,
        },
    }


def test_jobs_in_a_dm_has_buttons_that_pause_and_resume_in_place(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack
) -> None:
    """In a DM (where only the person is) ``jobs`` is posted, not ephemeral: its buttons
    redraw it in place with chat.update. (In a channel it is ephemeral:
    test_slack_commands.)"""
    model_server.script(
        tool_call("schedule_task", {"prompt": "report", "schedule": "0 9 * * 1-5"}), "Scheduled."
    )
    assert _post_event(gateway, _direct("every weekday at 9", ts="1700000800.000100"))[0] == 200
    slack.wait_for("chat.postMessage", 1)
    assert _slash(gateway, "jobs", channel=DM) == 200
    listing = slack.wait_for("chat.postMessage", 2)[1]
    assert listing["channel"] == DM
    actions = [b for b in listing["blocks"] if b["type"] == "actions"]
    [buttons] = [a["elements"] for a in actions]
    assert [b["text"]["text"] for b in buttons] == ["Pause", "Delete"]
    schedule_id = buttons[0]["value"]
    ts = posted_ts(2)  # what the fake answered for the listing
    # Someone else may not pause it.
    assert (
        _press_job(gateway, "chatgate_job_pause", schedule_id, user="U0MALLORY", ts=ts, channel=DM)
        == 200
    )
    [refusal] = slack.wait_for("chat.postEphemeral", 1)
    assert "only slack:U0ALICE" in refusal["text"]
    # Its creator may: the listing is redrawn in place with Resume.
    assert (
        _press_job(gateway, "chatgate_job_pause", schedule_id, user="U0ALICE", ts=ts, channel=DM)
        == 200
    )
    [update] = slack.wait_for("chat.update", 1)
    assert update["ts"] == ts
    redrawn = next(b for b in update["blocks"] if b["type"] == "actions")["elements"]
    assert [b["text"]["text"] for b in redrawn] == ["Resume", "Delete"]
    assert "*paused*" in json.dumps(update["blocks"])
    assert slack.posted("chat.postEphemeral")[1:] == []


SELF_APPROVE_OFF = """
[[policy]]
tool = "run_command"
decision = "ask"
self_approve = false
"""


def test_with_self_approve_off_the_requester_is_refused_and_an_admin_runs_it_once(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """A policy with ``self_approve = false``: the requester's own press is refused in
    private and runs nothing; an admin's press runs the command once."""
    (tmp_path / "chatgate.toml").write_text(SELF_APPROVE_OFF)
    process = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_ADMINS="slack:U0ADMIN",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_CONFIG=str(tmp_path / "chatgate.toml"),
        **slack.settings(),
        **model_server.settings(),
    )
    model_server.script(
        tool_call("run_command", {"command": "echo ran >> runs; cat runs"}), "Ran it."
    )
    process.start()
    try:
        assert _post_event(process, _mention("run it", ts="1700000100.000100"))[0] == 200
        [prompt] = slack.wait_for("chat.postMessage", 1)
        blocks = (
            prompt["blocks"] if isinstance(prompt["blocks"], list) else json.loads(prompt["blocks"])
        )
        approval_id = blocks[1]["elements"][0]["value"]
        assert _press(process, approval_id, user="U0ALICE", message_ts=prompt_ts(slack)) == 200
        [refusal] = slack.wait_for("chat.postEphemeral", 1)
        assert refusal["user"] == "U0ALICE"
        assert "policy needs someone else to approve it" in refusal["text"]
        time.sleep(1)
        assert len(model_server.requests) == 1
        assert _press(process, approval_id, user="U0ADMIN", message_ts=prompt_ts(slack)) == 200
        [update] = slack.wait_for("chat.update", 1)
        assert update["text"] == "slack:U0ADMIN approved run_command"
        posts = slack.wait_for("chat.postMessage", 2)
        assert posts[1]["text"] == "Ran it."
        assert model_server.requests[1]["messages"][-1]["content"] == "exit code 0\nran\n"
        assert _press(process, approval_id, user="U0ADMIN", message_ts=prompt_ts(slack)) == 200
        time.sleep(1)
        assert len(model_server.requests) == 2
    finally:
        process.stop()


def test_a_socket_cut_without_a_close_frame_is_noticed_and_reconnected(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """The fake aborts the Socket Mode connection (no close frame) and refuses new ones
    for a while: /readyz (still 200: the gateway serves the rest) and the metrics say
    Slack is deaf meanwhile; once Slack lets it, the gateway is connected again and
    answers over the new socket."""
    process = _socket_mode(database_url, model_server, slack, tmp_path)
    model_server.script("after the reconnect")
    process.start()
    try:
        _until(lambda: _ready(process)[1].get("platforms", {}).get("slack", {}).get("connected"))
        slack.refuse_connections = True
        slack.drop()
        _until(lambda: _ready(process)[1]["deaf"] == ["slack"], timeout=40)
        status, body = _ready(process)
        assert status == 200, body
        assert "Socket Mode disconnected" in body["platforms"]["slack"]["reason"], body
        assert body["platforms"]["slack"]["deaf_since"] is not None
        assert body["platforms"]["slack"]["connected"] is False
        metrics = http("GET", f"{process.url}/metrics")[1]
        assert 'chatgate_platform_connected{platform="slack"} 0.0' in metrics
        assert 'chatgate_platform_deaf{platform="slack"} 1.0' in metrics
        slack.refuse_connections = False
        _until(lambda: _ready(process)[1]["deaf"] == [], timeout=40)
        assert _ready(process)[1]["platforms"]["slack"]["connected"] is True
        assert slack.connections == 2
        slack.push(
            {
                "type": "events_api",
                "envelope_id": "env-after",
                "accepts_response_payload": False,
                "retry_attempt": 0,
                "retry_reason": "",
                "payload": _mention("still there?", ts="1700000500.000100"),
            }
        )
        slack.wait_for_ack("env-after")
        [post] = slack.wait_for("chat.postMessage", 1)
        assert post["text"] == "after the reconnect"
        assert "slack socket mode connection lost" in process.log
        assert "slack socket mode reconnected" in process.log
        assert _ready(process)[1]["platforms"]["slack"]["last_event_at"] is not None
    finally:
        process.stop()


def _ready(process: GatewayProcess) -> tuple[int, Any]:
    return http("GET", f"{process.url}/readyz")


def _until(condition: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_forget_me_asks_with_buttons_and_only_the_asker_can_erase(
    gateway: GatewayProcess, model_server: FakeModelServer, database_url: str, slack: FakeSlack
) -> None:
    """``/chatgate forget me`` in the DM: Erase / Keep buttons; someone else's press is
    refused (only they see why) and erases nothing; the asker's Erase erases them and the
    question becomes the receipt, without buttons. (In a channel the question is
    ephemeral: test_slack_commands.)"""
    model_server.script("Noted.")
    mention = _mention("my locker code is quince77", ts="1700000900.000100")
    assert _post_event(gateway, mention)[0] == 200
    slack.wait_for("chat.postMessage", 1)
    assert _slash(gateway, "forget me", channel=DM) == 200
    question = slack.wait_for("chat.postMessage", 2)[1]
    [actions] = [b for b in question["blocks"] if b["type"] == "actions"]
    labels = [b["text"]["text"] for b in actions["elements"]]
    assert labels == ["Erase my data", "Keep it"]
    erase = actions["elements"][0]
    ts = posted_ts(2)
    press = {"action_id": erase["action_id"], "schedule_id": erase["value"], "ts": ts}
    assert _press_job(gateway, **press, user="U0MALLORY", channel=DM) == 200
    [refusal] = slack.wait_for("chat.postEphemeral", 1)
    assert "Only the person who asked" in refusal["text"]
    assert "messages.text" in columns_holding(database_url, "quince77")
    assert _press_job(gateway, **press, user="U0ALICE", channel=DM) == 200
    [update] = slack.wait_for("chat.update", 1)
    assert update["ts"] == ts
    assert "Erased slack:U0ALICE's data" in update["text"]
    blocks = update["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    assert [b["type"] for b in blocks] == ["section"]
    assert columns_holding(database_url, "quince77") == []
