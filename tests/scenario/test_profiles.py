"""Per-channel profiles: two Slack channels with different profiles get different models,
system prompts and tools (seen in each fake model's requests), a thread has its channel's,
the journal records which profile answered, ``/profile`` and ``/model`` show it, and only an
admin may choose another. The real slack-bolt in a gateway process, the real litellm."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Connection

from agent_core.storage.schema import turn_steps
from tests.fakes.database_reads import read_database
from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import FakeSlack
from tests.scenario.test_slack import _mention, _post_event

pytestmark = pytest.mark.any_database

OPS, GENERAL = "C0OPS", "C0GENERAL"
TOKEN = "profiles-test-token-4c1f9e"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as server:
        yield server


def _said(text: str, *, channel: str, ts: str, thread: str | None = None,
          user: str = "U0ALICE") -> dict[str, Any]:  # fmt: skip
    payload = _mention(text, ts=ts, user=user, event_id=f"Ev{ts}")
    payload["event"]["channel"] = channel
    if thread is not None:
        payload["event"] |= {"thread_ts": thread}
    return payload


def _profiles_answered(conn: Connection) -> list[Any]:
    rows = conn.execute(
        select(turn_steps.c.turn_id, turn_steps.c.input)
        .where(turn_steps.c.kind == "model_call")
        .order_by(turn_steps.c.turn_id, turn_steps.c.seq)
    ).all()
    return [(row.input or {}).get("profile") for row in rows]


def _answer(slack: FakeSlack, number: int) -> str:
    """The text of the ``number``-th thing the agent said (posted, or shown only to the
    person who asked), once it has said that many."""
    deadline = time.monotonic() + 30
    while True:
        said = [
            a["text"]
            for m, a in list(slack.calls)
            if m in ("chat.postMessage", "chat.postEphemeral")
        ]
        if len(said) >= number:
            return str(said[number - 1])
        assert time.monotonic() < deadline, slack.calls
        time.sleep(0.05)


def _system(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"])


def _tools(request: dict[str, Any]) -> list[str]:
    return sorted(t["function"]["name"] for t in request.get("tools") or [])


def test_two_channels_have_their_profiles_and_a_thread_its_channels(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    with FakeModelServer() as ops_model, FakeModelServer() as general_model:
        config = tmp_path / "chatgate.toml"
        config.write_text(f"""
[[profile]]
name = "ops"
platform = "slack"
channel = "{OPS}"
model = "openai/ops-model"
api_base = "{ops_model.base_url}"
system_prompt = "You are the ops bot."
tools = ["schedule_*", "list_schedules"]
reply = "all"

[[profile]]
name = "general"
platform = "slack"
model = "openai/general-model"
api_base = "{general_model.base_url}"
system_prompt = "You are the general bot."
""")
        process = GatewayProcess(
            database_url=database_url,
            workdir=tmp_path,
            CHATGATE_ACCESS="open",
            CHATGATE_ADMINS="slack:U0ADMIN",
            CHATGATE_WEB_TOKEN=TOKEN,
            CHATGATE_CONFIG=str(config),
            CHATGATE_STATE_DIR=str(tmp_path / "state"),
            **slack.settings(),
            **model_server.settings(),
        )
        process.start()
        try:
            ops_model.script("ops answer", "ops thread answer", "ops answer to chatter")
            general_model.script("general answer", "general answer in the ops thread")
            top = "1700000600.000100"
            assert _post_event(process, _said("is prod up?", channel=OPS, ts=top))[0] == 200
            _answer(slack, 1)
            assert (
                _post_event(process, _said("hello", channel=GENERAL, ts="1700000601.000100"))[0]
                == 200
            )
            _answer(slack, 2)
            in_thread = _said("and staging?", channel=OPS, ts="1700000602.000100", thread=top)
            assert _post_event(process, in_thread)[0] == 200
            _answer(slack, 3)

            assert [_system(r) for r in ops_model.requests] == ["You are the ops bot."] * 2
            assert [_system(r) for r in general_model.requests] == ["You are the general bot."]
            assert model_server.requests == []  # the settings' model answers nowhere here
            assert ops_model.requests[1]["messages"][-1]["content"] == "and staging?"
            offered = _tools(ops_model.requests[0])
            assert offered
            assert all(n.startswith("schedule_") or n == "list_schedules" for n in offered)
            assert "http_request" in _tools(general_model.requests[0])
            assert read_database(database_url, _profiles_answered) == ["ops", "general", "ops"]

            # /profile and /model say what applies and why; only an admin chooses.
            shown = _said("/profile", channel=OPS, ts="1700000603.000100", thread=top)
            assert _post_event(process, shown)[0] == 200
            answer = _answer(slack, 4)
            assert answer.startswith("Profile here: ops (from where this conversation is).")
            assert "Profiles: ops, general." in answer
            refused = _said("/profile general", channel=OPS, ts="1700000604.000100", thread=top)
            assert _post_event(process, refused)[0] == 200
            assert "Only an admin" in _answer(slack, 5)
            chosen = _said("/profile general", channel=OPS, ts="1700000605.000100", thread=top,
                           user="U0ADMIN")  # fmt: skip
            assert _post_event(process, chosen)[0] == 200
            answer = _answer(slack, 6)
            assert answer.startswith("Profile here: general (chosen by an admin).")
            model = _said("/model", channel=OPS, ts="1700000606.000100", thread=top)
            assert _post_event(process, model)[0] == 200
            answer = _answer(slack, 7)
            assert answer.startswith("Model here: openai/general-model (from profile general).")
            again = _said("and now?", channel=OPS, ts="1700000607.000100", thread=top)
            assert _post_event(process, again)[0] == 200
            _answer(slack, 8)
            assert len(general_model.requests) == 2
            assert len(ops_model.requests) == 2
            assert read_database(database_url, _profiles_answered)[-1] == "general"
            # Said to nobody: answered where the profile answers every message (in a thread
            # of its own), left alone where it answers mentions only.
            for channel, ts in ((GENERAL, "1700000608.000100"), (OPS, "1700000609.000100")):
                chatter = _said("x", channel=channel, ts=ts)
                chatter["event"] |= {"type": "message", "text": "deploy at 5?",
                                     "channel_type": "channel"}  # fmt: skip
                assert _post_event(process, chatter)[0] == 200
            assert _answer(slack, 9) == "ops answer to chatter"
            last = [a for m, a in slack.calls if m == "chat.postMessage"][-1]
            assert (last["channel"], last["thread_ts"]) == (OPS, "1700000609.000100")
            time.sleep(0.5)
            assert len(general_model.requests) == 2
            # The console's timeline says which profile answered.
            status, turn = http(
                "GET",
                f"{process.url}/api/console/turns/1",
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert status == 200, turn
            assert [(s["model"], s["profile"]) for s in turn["steps"]
                    if s["kind"] == "model_call"] == [("ops-model", "ops")]  # fmt: skip
        finally:
            process.stop()


def test_a_group_whose_profile_answers_every_message_is_answered_unaddressed(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """``reply = "all"``: a Telegram group's message that names nobody is answered there;
    in a group without such a profile the same message is left alone (and not stored)."""
    from tests.fakes.telegram_server import FakeTelegram
    from tests.scenario.test_telegram import GROUP, _gateway, _post, _text

    other_group = GROUP - 1
    config = tmp_path / "chatgate.toml"
    config.write_text(
        f'[[profile]]\nname = "chatty"\nplatform = "telegram"\nchannel = "{GROUP}"\n'
        'reply = "all"\nsystem_prompt = "You answer everything."\n'
    )
    with FakeTelegram() as telegram:
        process = _gateway(
            database_url, model_server, telegram, tmp_path, CHATGATE_CONFIG=str(config)
        )
        process.start()
        try:
            model_server.script("Everyone, the build is green.")
            assert (
                _post(process, _text("anyone know if the build is green?", chat=other_group)) == 200
            )
            assert _post(process, _text("anyone know if the build is green?", chat=GROUP)) == 200
            [sent] = telegram.wait_for("sendMessage", 1)
            assert sent["chat_id"] == str(GROUP)
            time.sleep(1)
            assert len(telegram.called("sendMessage")) == 1
            assert len(model_server.requests) == 1
            assert _system(model_server.requests[0]) == "You answer everything."
        finally:
            process.stop()
    assert read_database(database_url, _conversation_channels) == [str(GROUP)]


def _conversation_channels(conn: Connection) -> list[str]:
    from agent_core.storage.schema import conversations

    return [str(c) for c in conn.execute(select(conversations.c.channel)).scalars()]
