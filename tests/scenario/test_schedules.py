"""Schedules and background work end to end, in the embedded profile (``chatgate run``,
no Redis): created through the model in the web chat, fired by the dispatcher, run by the
in-process job runner, delivered once, and not repeated after a SIGKILL mid-run."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from agent_core.storage.database import Database
from agent_core.storage.schema import jobs, messages, schedule_runs, turn_steps
from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.http_echo import EchoServer, http_allowed_config
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.scenario.test_tool_crashes import tool_call


@pytest.fixture
def chatgate(
    database_url: str, model_server: FakeModelServer, echo: EchoServer, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """``chatgate run`` (embedded job runner), ticking every half second; POSTs to the
    echo server are allowed without asking."""
    config = http_allowed_config(tmp_path / "chatgate.toml", echo)
    process = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_CONFIG=str(config),
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_SCHEDULE_TICK_SECONDS="0.5",
        CHATGATE_SCHEDULE_MIN_SECONDS="1",
        **model_server.settings(),
    )
    yield process
    process.stop()


def _assistant(items: list[dict[str, Any]]) -> list[str]:
    return [str(item["text"]) for item in items if item["role"] == "assistant"]


def _wait_for(
    gateway: GatewayProcess, conversation_id: str, text: str, *, timeout: float = 30
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    items: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        items = gateway.messages(conversation_id)
        if any(text in str(item["text"]) for item in items):
            return items
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never arrived: {items}\n{gateway.log}")


def _journal(database_url: str) -> tuple[list[tuple[str, str]], Any]:
    """The tool-call steps and the job row, read straight from the database."""

    async def read() -> tuple[list[tuple[str, str]], Any]:
        database = Database(database_url)
        try:
            return await database.read(
                lambda conn: (
                    [
                        (str(kind), str(status))
                        for kind, status in conn.execute(
                            select(turn_steps.c.kind, turn_steps.c.status)
                            .where(turn_steps.c.kind == "tool_call")
                            .order_by(turn_steps.c.seq)
                        ).all()
                    ],
                    conn.execute(select(jobs)).one(),
                )
            )
        finally:
            await database.dispose()

    return asyncio.run(read())


def test_a_one_shot_created_through_the_model_fires_once_at_its_time(
    chatgate: GatewayProcess, model_server: FakeModelServer
) -> None:
    model_server.script(
        tool_call("schedule_task", {"prompt": "Remind me to stretch", "schedule": "in 3s"}),
        "Done: I will remind you in 3 seconds.",
        "Time to stretch!",
    )
    chatgate.start(command="run")
    accepted = chatgate.post("desk", "remind me to stretch in 3 seconds", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    _wait_for(chatgate, conversation_id, "Done: I will remind you")
    created = time.monotonic()
    items = _wait_for(chatgate, conversation_id, "Time to stretch!")
    waited = time.monotonic() - created
    assert 1.5 < waited < 8, waited
    # The scheduled turn asked the model the schedule's prompt, as the creator.
    assert model_server.user_texts()[-1] == "Remind me to stretch"
    time.sleep(2)  # several more ticks: nothing fires twice
    items = chatgate.messages(conversation_id)
    assert _assistant(items) == ["Done: I will remind you in 3 seconds.", "Time to stretch!"]
    assert len(model_server.requests) == 3
    # /jobs shows it done, with its one delivered run.
    chatgate.post("desk", "/jobs", id="m-2")
    listing = _wait_for(chatgate, conversation_id, "Schedules in this conversation")[-1]
    [schedule] = listing["jobs"]
    assert schedule["status"] == "done"
    [run] = schedule["runs"]
    assert run["status"] == "done"
    assert run["receipt"]


def test_a_reminder_posts_its_text_at_its_time_with_no_model_request(
    chatgate: GatewayProcess, model_server: FakeModelServer
) -> None:
    """``schedule_task(kind="message")``: at the slot the text itself is posted; the only
    model requests are the two of the turn that created it. /jobs says it is a reminder."""
    model_server.script(
        tool_call(
            "schedule_task",
            {"prompt": "Reminder: send the report", "schedule": "in 2s", "kind": "message"},
        ),
        "I will remind you.",
    )
    chatgate.start(command="run")
    accepted = chatgate.post("desk", "remind me to send the report in 2 seconds", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    _wait_for(chatgate, conversation_id, "I will remind you.")
    _wait_for(chatgate, conversation_id, "Reminder: send the report")
    time.sleep(1.5)  # more ticks: nothing fires twice, nothing asks the model
    items = chatgate.messages(conversation_id)
    assert _assistant(items) == ["I will remind you.", "Reminder: send the report"]
    assert len(model_server.requests) == 2
    chatgate.post("desk", "/jobs", id="m-2")
    listing = _wait_for(chatgate, conversation_id, "reminder: Reminder: send the report")[-1]
    [schedule] = listing["jobs"]
    [run] = schedule["runs"]
    assert (schedule["status"], run["status"]) == ("done", "done")
    assert run["receipt"]


def test_a_quiet_check_posts_only_the_run_its_model_marks_notable(
    chatgate: GatewayProcess, model_server: FakeModelServer
) -> None:
    """Two one-shot checks with ``notify = "if_notable"``: the first run's model finds
    nothing (nothing posted; /jobs says "nothing to report"), the second's finds something
    (its report is posted, and only that)."""
    check = {"prompt": "Check the build", "notify": "if_notable"}
    model_server.script(
        tool_call("schedule_task", {**check, "schedule": "in 2s"}),
        tool_call("schedule_task", {**check, "schedule": "in 4s"}),
        "I will tell you if the build breaks.",
        '{"notable": false, "report": "build 811 green"}',
        '```json\n{"notable": true, "report": "Build 812 is red: test_login."}\n```',
    )
    chatgate.start(command="run")
    accepted = chatgate.post("desk", "tell me if the build breaks", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    _wait_for(chatgate, conversation_id, "Build 812 is red: test_login.")
    assert _assistant(chatgate.messages(conversation_id)) == [
        "I will tell you if the build breaks.",
        "Build 812 is red: test_login.",
    ]
    assert len(model_server.requests) == 5
    assert model_server.user_texts()[-1].startswith("Check the build\n\n(This is a scheduled")
    chatgate.post("desk", "/jobs", id="m-2")
    listing = _wait_for(chatgate, conversation_id, "nothing to report")[-1]
    runs = sorted((run for job in listing["jobs"] for run in job["runs"]),
                  key=lambda run: run["scheduled_for"])  # fmt: skip
    assert [(run["status"], run["nothing_to_report"], bool(run["receipt"])) for run in runs] == [
        ("done", True, False),
        ("done", False, True),
    ]
    assert "posts only when notable: Check the build" in str(listing["text"])


def test_bg_runs_in_the_background_and_posts_the_answer_here(
    chatgate: GatewayProcess, model_server: FakeModelServer
) -> None:
    model_server.script(Scripted(text="background result", delay=1.0), "quick answer")
    chatgate.start(command="run")
    accepted = chatgate.post("desk", "/bg crunch the numbers", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    _wait_for(chatgate, conversation_id, "Working on it in the background")
    model_server.wait_for_requests(1)
    # The conversation is not blocked meanwhile: a chat message is answered first.
    chatgate.post("desk", "are you there?", id="m-2")
    _wait_for(chatgate, conversation_id, "quick answer")
    items = _wait_for(chatgate, conversation_id, "background result")
    assert _assistant(items) == ["quick answer", "background result"]
    assert model_server.user_texts()[0] == "crunch the numbers"


def test_the_embedded_runner_killed_mid_run_finishes_once_after_restart(
    chatgate: GatewayProcess,
    model_server: FakeModelServer,
    echo: EchoServer,
    database_url: str,
) -> None:
    never = threading.Event()
    model_server.script(
        tool_call("http_request", {"method": "POST", "url": f"http://{echo.host}/charge"}),
        Scripted(text="lost with the process", gate=never),
        "Charged once.",
    )
    chatgate.start(command="run")
    accepted = chatgate.post("desk", "/bg charge the card", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    model_server.wait_for_requests(2)  # the tool ran; the second model call hangs
    chatgate.kill()
    chatgate.start(command="run")
    items = _wait_for(chatgate, conversation_id, "Charged once.")
    time.sleep(1.5)
    items = chatgate.messages(conversation_id)
    assert _assistant(items) == ["Charged once."]
    assert echo.effects() == 1
    assert len(model_server.requests) == 3
    steps, job = _journal(database_url)
    assert steps == [("tool_call", "done")]
    assert job.status == "done"
    assert job.attempts == 2
    assert job.receipt


def test_jobs_buttons_pause_resume_and_delete_over_the_api(
    chatgate: GatewayProcess, model_server: FakeModelServer
) -> None:
    model_server.script(
        tool_call("schedule_task", {"prompt": "tick", "schedule": "every 2s"}), "Scheduled."
    )
    chatgate.start(command="run", CHATGATE_SCHEDULE_TICK_SECONDS="0.3")
    accepted = chatgate.post("desk", "say tick every 2 seconds", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    _wait_for(chatgate, conversation_id, "Scheduled.")
    chatgate.post("desk", "/jobs", id="m-2")
    listing = _wait_for(chatgate, conversation_id, "Schedules in this conversation")[-1]
    [schedule] = listing["jobs"]
    url = f"{chatgate.url}/api/schedules/{schedule['id']}"
    status, body = http("POST", url, {"action": "pause", "message_id": listing["id"]})
    assert (status, body["status"]) == (200, "paused")
    fired = len(model_server.requests)
    time.sleep(3)
    assert len(model_server.requests) == fired  # paused: nothing fires
    assert http("POST", url, {"action": "pause", "user": "mallory"})[0] == 403
    assert http("POST", url, {"action": "explode"})[0] == 400
    assert http("POST", f"{chatgate.url}/api/schedules/sc_00000000", {"action": "pause"})[0] == 404
    status, body = http("POST", url, {"action": "resume"})
    assert (status, body["status"]) == (200, "active")
    _wait_for(chatgate, conversation_id, "echo: tick", timeout=10)
    status, body = http("POST", url, {"action": "delete", "message_id": listing["id"]})
    assert (status, body["status"]) == (200, "deleted")
    time.sleep(1)
    fired = len(model_server.requests)
    time.sleep(3)
    assert len(model_server.requests) == fired
    refreshed = next(i for i in chatgate.messages(conversation_id) if i["id"] == listing["id"])
    assert refreshed["jobs"] == []
    notes = [i["text"] for i in chatgate.messages(conversation_id) if i["role"] == "system"]
    assert f"web:local paused schedule {schedule['id']}." in notes


def _runs(database_url: str) -> list[Any]:
    """Every schedule run with its job's status, oldest slot first."""

    async def read() -> list[Any]:
        database = Database(database_url)
        try:
            return await database.read(
                lambda conn: conn.execute(
                    select(schedule_runs.c.scheduled_for, jobs.c.status, jobs.c.attempts)
                    .join(jobs, jobs.c.run_id == schedule_runs.c.id)
                    .order_by(schedule_runs.c.scheduled_for)
                ).all()
            )
        finally:
            await database.dispose()

    return asyncio.run(read())


def test_killed_after_a_jobs_reply_went_out_and_before_the_job_was_closed(
    chatgate: GatewayProcess, model_server: FakeModelServer, database_url: str
) -> None:
    """The background turn's reply is delivered, then the process dies before the job is
    marked done: the next start closes the job without running or sending anything
    again."""
    model_server.script("background result")
    chatgate.start(command="run", CHATGATE_TEST_FAULT="after_job_turn")
    accepted = chatgate.post("desk", "/bg crunch the numbers", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    assert chatgate.wait_exit() == -9, chatgate.log
    chatgate.start(command="run")
    items = chatgate.wait_settled(conversation_id)
    deadline = time.monotonic() + 30
    while _journal(database_url)[1].status != "done":
        assert time.monotonic() < deadline, chatgate.log
        time.sleep(0.1)
    items = chatgate.messages(conversation_id)
    assert _assistant(items) == ["background result"]
    assert len(model_server.requests) == 1
    assert _journal(database_url)[1].attempts == 2


def test_killed_after_a_slot_was_committed_and_before_its_job_was_handed_on(
    chatgate: GatewayProcess, model_server: FakeModelServer, database_url: str
) -> None:
    """The dispatcher commits the first slot of an every-2s schedule and dies before
    handing its job to the runner: after a restart that slot runs once, and every later
    slot once, none missed."""
    model_server.script(
        tool_call("schedule_task", {"prompt": "tick", "schedule": "every 2s"}), "Scheduled."
    )
    chatgate.start(command="run", CHATGATE_TEST_FAULT="after_slots_committed")
    accepted = chatgate.post("desk", "tick every 2 seconds", id="m-1")
    conversation_id = str(accepted["conversation_id"])
    assert chatgate.wait_exit(timeout=60) == -9, chatgate.log
    assert [status for _slot, status, _n in _runs(database_url)] == ["queued"]
    chatgate.start(command="run")
    deadline = time.monotonic() + 60
    while sum(t == "echo: tick" for t in _assistant(chatgate.messages(conversation_id))) < 3:
        assert time.monotonic() < deadline, chatgate.log
        time.sleep(0.1)
    assert chatgate.terminate() == 0
    runs = _runs(database_url)
    ticks = _answers(database_url, conversation_id)
    assert runs[0][1:] == ("done", 1)
    done = [run for run in runs if run[1] == "done"]
    assert ticks.count("echo: tick") == len(done)
    gaps = {(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(runs)}
    assert gaps <= {2.0}, runs


def _answers(database_url: str, conversation_id: str) -> list[str]:
    """The conversation's assistant messages, read straight from the database."""

    async def read() -> list[str]:
        database = Database(database_url)
        try:
            return await database.read(
                lambda conn: [
                    str(text)
                    for text in conn.execute(
                        select(messages.c.text)
                        .where(
                            messages.c.conversation_id == conversation_id,
                            messages.c.role == "assistant",
                        )
                        .order_by(messages.c.id)
                    ).scalars()
                ]
            )
        finally:
            await database.dispose()

    return asyncio.run(read())
