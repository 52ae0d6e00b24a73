"""Revocation reaches everything: a paired Telegram user with a schedule and a pending
approval is revoked with ``chatgate pairing revoke``; the running gateway cancels the
approval (the prompt says so), pauses the schedule with a note, and no slot of it calls
the model again."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gateway import CHATGATE, GatewayProcess, child_env
from tests.fakes.model_server import FakeModelServer, Scripted
from tests.fakes.telegram_server import FakeTelegram
from tests.scenario.test_telegram import _post, _text

BOB = 7770001


def _call(name: str, arguments: dict[str, Any]) -> Scripted:
    return Scripted(
        tool_calls=[
            {
                "id": f"call_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
    )


def _answer(body: dict[str, Any]) -> Scripted | None:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Scripted(text="done")
    text = str(last.get("content", ""))
    if text == "schedule the tick":
        return _call("schedule_task", {"prompt": "Say tick", "schedule": "every 2s"})
    if text == "run it":
        return _call("run_command", {"command": "echo hi"})
    if text == "Say tick":
        return Scripted(text="tick")
    return None


def _chatgate(*args: str, cwd: Path, database_url: str) -> str:
    result = subprocess.run(
        [str(CHATGATE), *args],
        cwd=cwd,
        env=child_env(CHATGATE_DATABASE_URL=database_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _wait(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _ticks(model: FakeModelServer) -> int:
    return sum(text == "Say tick" for text in model.user_texts())


def test_a_revoked_user_s_schedule_stops_and_their_approval_is_cancelled(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """After ``pairing revoke``: the pending approval is cancelled and its prompt edited to
    say why, the turn it held ends without another model call, the schedule is paused with
    a note, and its next slots call no model."""
    model_server.respond = _answer
    with FakeTelegram() as telegram:
        gateway = GatewayProcess(
            database_url=database_url,
            workdir=tmp_path,
            CHATGATE_ACCESS="pairing",
            CHATGATE_STATE_DIR=str(tmp_path / "state"),
            CHATGATE_SCHEDULE_TICK_SECONDS="0.5",
            CHATGATE_SCHEDULE_MIN_SECONDS="1",
            **telegram.settings(),
            **model_server.settings(),
        )
        gateway.start(command="run")
        try:
            assert _post(gateway, _text("hello", chat=BOB, user=BOB)) == 200
            [code_message] = telegram.wait_for("sendMessage", 1)
            code = re.search(r"[A-Z2-9]{4}-[A-Z2-9]{4}", code_message["text"])
            assert code is not None, code_message
            _chatgate("pairing", "approve", code.group(), cwd=tmp_path, database_url=database_url)

            assert _post(gateway, _text("schedule the tick", chat=BOB, user=BOB)) == 200
            _wait(lambda: _ticks(model_server) >= 1, "the schedule never fired")
            assert _post(gateway, _text("run it", chat=BOB, user=BOB)) == 200
            _wait(
                lambda: any(
                    "approval" in m.get("text", "") for m in telegram.called("sendMessage")
                ),
                "no approval prompt",
            )
            prompt = next(m for m in telegram.delivered if "approval" in str(m.get("text", "")))

            _chatgate(
                "pairing", "revoke", f"telegram:{BOB}", cwd=tmp_path, database_url=database_url
            )
            _wait(
                lambda: any("cancelled" in e["text"] for e in telegram.called("editMessageText")),
                "the approval prompt was not edited",
            )
            [edit] = [e for e in telegram.called("editMessageText") if "cancelled" in e["text"]]
            assert edit["message_id"] == str(prompt["message_id"])
            assert f"telegram:{BOB} may no longer use the agent here" in edit["text"]
            # Paused with a note: by the sweep ("I paused schedule ..."), or by a slot's run
            # that comes first ("Schedule ... did not run and is paused ...").
            _wait(
                lambda: _pause_notes(telegram.called("sendMessage")) >= 1,
                "no note that the schedule paused",
            )
            _wait(
                lambda: any(
                    m["text"].startswith("Stopped:") for m in telegram.called("sendMessage")
                ),
                "the turn held by the approval did not end",
            )
            calls = len(model_server.requests)
            ticks = _ticks(model_server)
            notes = _pause_notes(telegram.called("sendMessage"))
            time.sleep(5)  # two more slots of the schedule, had it stayed active
            assert _ticks(model_server) == ticks
            assert len(model_server.requests) == calls
            assert _pause_notes(telegram.called("sendMessage")) == notes
            # run it: one model call, then the cancellation ended the turn without another.
            assert sum(text == "run it" for text in model_server.user_texts()) == 1
            assert not any(
                r["messages"][-1]["role"] == "tool" and "echo" in str(r["messages"][-1])
                for r in model_server.requests
            )
        finally:
            gateway.stop()


@pytest.mark.any_database
def test_pairing_revoke_says_what_follows(tmp_path: Path) -> None:
    """The command tells the operator what the revocation reaches."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'chatgate.db'}"
    result = subprocess.run(
        [str(CHATGATE), "pairing", "revoke", "telegram:1"],
        cwd=tmp_path,
        env=child_env(CHATGATE_DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "is not paired" in result.stderr


def _pause_notes(sent: list[dict[str, Any]]) -> int:
    """How many messages said that the schedule is paused for its owner's lost access."""
    return sum(
        "I paused schedule" in m["text"] or "did not run and is paused" in m["text"] for m in sent
    )
