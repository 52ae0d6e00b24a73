"""Slack's agent sessions (issue #29): the thread's session shows what the agent does
(processing, suspended, active, titled from the first message), and Slack's own Stop
button (``agent_session_stopped``) ends the turn like ``/stop``: during a streamed reply,
and while the turn waits for an approval, which is cancelled. The real slack-bolt and
slack_sdk in a ``chatgate gateway`` against the fake Slack."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from agent_core.storage.database import Database
from agent_core.storage.schema import approvals, turns
from tests.fakes.gateway import GatewayProcess
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.slack_server import TEAM, FakeSlack
from tests.scenario.test_slack import CHANNEL, _mention, _post_event
from tests.scenario.test_streaming import _gateway, _wait
from tests.scenario.test_tool_crashes import tool_call

pytestmark = pytest.mark.any_database

# About 20 s of writing: only a stop ends it in time.
LONG = " ".join(f"piece{i:02d}" for i in range(80))


@pytest.fixture
def gateway(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> Iterator[GatewayProcess]:
    process = _gateway(database_url, model_server, slack, tmp_path)
    process.start()
    yield process
    process.stop()


def _stopped(thread: str, streams: list[str], *, user: str = "U0ALICE") -> dict[str, Any]:
    return {
        "token": "unused",
        "team_id": TEAM,
        "api_app_id": "A0CHATGATE",
        "type": "event_callback",
        "event_id": f"EvStop{thread}",
        "event_time": int(time.time()),
        "event": {
            "type": "agent_session_stopped",
            "channel": CHANNEL,
            "thread_ts": thread,
            "user": user,
            "streaming_message_ts": streams,
            "event_ts": f"{time.time():.6f}",
        },
    }


def _turn_and_approvals(database_url: str) -> tuple[Any, list[str]]:
    async def read() -> tuple[Any, list[str]]:
        database = Database(database_url)
        try:
            return await database.read(
                lambda conn: (
                    conn.execute(
                        select(turns.c.status, turns.c.error, turns.c.stop_requested_by)
                    ).one(),
                    list(conn.execute(select(approvals.c.status)).scalars()),
                )
            )
        finally:
            await database.dispose()

    return asyncio.run(read())


def test_slacks_stop_ends_a_streamed_reply_at_its_next_step(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack, database_url: str
) -> None:
    thread = "1700000100.000100"
    model_server.script(Scripted(text=LONG, chunk_delay=0.25), "never asked")
    assert _post_event(gateway, _mention("write the long report", ts=thread))[0] == 200
    slack.wait_for("chat.startStream", 1)
    _wait(lambda: slack.sessions.get((CHANNEL, thread), {}).get("status") == "processing")
    session = slack.sessions[(CHANNEL, thread)]
    assert "write the long report" in session["title"]
    [first] = slack.called("agents.sessions.setStatus")[:1]
    assert first["initiator_user_id"] == "U0ALICE"

    streams = slack.stop_session(CHANNEL, thread)
    assert len(streams) == 1
    assert _post_event(gateway, _stopped(thread, streams))[0] == 200
    _wait(lambda: "Stopped by slack:U0ALICE." in str(slack.message(streams[0])["text"]))
    _wait(lambda: slack.sessions[(CHANNEL, thread)]["status"] == "active")
    appended = len(slack.called("chat.appendStream"))
    time.sleep(1.5)
    # Nothing more: no append to the closed stream, no second model call, no post.
    assert len(slack.called("chat.appendStream")) == appended
    assert len(model_server.requests) == 1
    assert model_server.chunks_sent < 80
    assert slack.posted() == []
    turn, _approvals = _turn_and_approvals(database_url)
    assert tuple(turn) == ("failed", "stopped by slack:U0ALICE", "slack:U0ALICE")


def test_slacks_stop_while_waiting_for_an_approval_cancels_it(
    gateway: GatewayProcess, model_server: FakeModelServer, slack: FakeSlack, database_url: str
) -> None:
    thread = "1700000200.000100"
    model_server.script(tool_call("run_command", {"command": "echo should-not-run"}), "never asked")
    assert _post_event(gateway, _mention("run the echo", ts=thread))[0] == 200
    [prompt] = slack.wait_for("chat.postMessage", 1)
    assert prompt["thread_ts"] == thread
    _wait(lambda: slack.sessions.get((CHANNEL, thread), {}).get("status") == "suspended")

    assert _post_event(gateway, _stopped(thread, []))[0] == 200
    _wait(lambda: _turn_and_approvals(database_url)[0][0] == "failed")
    turn, states = _turn_and_approvals(database_url)
    assert tuple(turn) == ("failed", "stopped by slack:U0ALICE", "slack:U0ALICE")
    assert states == ["cancelled"]
    _wait(lambda: any("Stopped by slack:U0ALICE." in str(p["text"]) for p in slack.posted()))
    _wait(lambda: slack.sessions[(CHANNEL, thread)]["status"] == "active")
    assert len(model_server.requests) == 1
    assert not any("should-not-run" in str(p.get("text")) for p in slack.posted()[1:])


def test_a_stop_by_someone_who_may_not_talk_here_changes_nothing(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """Under an allowlist, a stranger's Stop is refused to them alone; the turn goes on."""
    process = _gateway(database_url, model_server, slack, tmp_path,
                       CHATGATE_ACCESS="allowlist", CHATGATE_ALLOW="slack:U0ALICE")  # fmt: skip
    process.start()
    try:
        thread = "1700000300.000100"
        model_server.script(Scripted(text=LONG[:300], chunk_delay=0.1))
        assert _post_event(process, _mention("write it", ts=thread))[0] == 200
        slack.wait_for("chat.startStream", 1)
        assert _post_event(process, _stopped(thread, [], user="U0MALLORY"))[0] == 200
        [refusal] = slack.wait_for("chat.postEphemeral", 1)
        assert refusal["user"] == "U0MALLORY"
        # Nor does a refused Stop touch the session: it still shows the agent working.
        assert slack.sessions[(CHANNEL, thread)]["status"] == "processing"
        [stop] = slack.wait_for("chat.stopStream", 1)
        assert slack.message(stop["ts"])["text"] == LONG[:300]
        turn, _ = _turn_and_approvals(database_url)
        assert tuple(turn) == ("done", None, None)
    finally:
        process.stop()


def test_a_malformed_stop_event_is_refused_not_a_500(
    gateway: GatewayProcess, model_server: FakeModelServer
) -> None:
    for broken in ({"team_id": None}, {"team_id": 5}, {"event": {"type": "agent_session_stopped"}}):
        envelope = {**_stopped("1700000400.000100", []), **broken}
        if "event" not in broken:
            envelope["event"] = {**envelope["event"], "thread_ts": 12}
        status, _body = _post_event(gateway, envelope)
        assert status in (200, 400), (broken, status)  # ignored or refused, never a 500
    assert _post_event(gateway, {**_stopped("1700000400.000100", []), "team_id": 5})[0] == 400
    assert model_server.requests == []
