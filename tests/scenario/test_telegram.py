"""Telegram end to end: the real python-telegram-bot in a ``chatgate gateway`` process
against a fake Bot API on 127.0.0.1, webhook and long polling, the real litellm against
the fake model."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gateway import CHATGATE, GatewayProcess, http
from tests.fakes.model_server import FakeModelServer
from tests.fakes.telegram_server import (
    BOT_ID,
    BOT_USERNAME,
    WEBHOOK_SECRET,
    FakeTelegram,
    parse_html,
)
from tests.scenario.test_forget import columns_holding
from tests.scenario.test_tool_crashes import tool_call

# About the adapters, not the storage: the SQLite pass runs it (tests/conftest.py).
pytestmark = pytest.mark.any_database

ALICE = 5551234
MALLORY = 6660000
GROUP = -1001987654321
_ids = itertools.count(1)


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    """The fake Bot API."""
    with FakeTelegram() as server:
        yield server


def _gateway(
    database_url: str,
    model_server: FakeModelServer,
    telegram: FakeTelegram,
    tmp_path: Path,
    *,
    webhook: bool = True,
    **settings: str,
) -> GatewayProcess:
    return GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        **telegram.settings(webhook=webhook),
        **model_server.settings(),
        **settings,
    )


@pytest.fixture
def gateway(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A gateway taking Telegram updates on its webhook, open to everyone."""
    process = _gateway(database_url, model_server, telegram, tmp_path)
    process.start()
    yield process
    process.stop()


def _text(text: str, *, chat: int = ALICE, user: int = ALICE) -> dict[str, Any]:
    """An update with a text message; a leading @mention comes with its entity, as
    Telegram sends it."""
    message_id = next(_ids)
    message: dict[str, Any] = {
        "message_id": message_id,
        "date": int(time.time()),
        "chat": {"id": chat, "type": "private" if chat > 0 else "supergroup"},
        "from": {"id": user, "is_bot": False, "first_name": "Someone"},
        "text": text,
    }
    if text.startswith(("@", "/")):
        kind = "mention" if text.startswith("@") else "bot_command"
        length = len(text.split()[0])
        message["entities"] = [{"offset": 0, "length": length, "type": kind}]
    return {"update_id": 800_000 + message_id, "message": message}


def _callback(data: str, *, user: int, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "update_id": 900_000 + next(_ids),
        "callback_query": {
            "id": f"cbq{next(_ids)}",
            "from": {"id": user, "is_bot": False, "first_name": "Someone"},
            "chat_instance": "-42",
            "data": data,
            "message": {
                "message_id": message["message_id"],
                "date": message["date"],
                "chat": message["chat"],
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "chatgate"},
                "text": message["text"],
            },
        },
    }


def _post(gateway: GatewayProcess, update: Any, *, secret: str | None = WEBHOOK_SECRET) -> int:
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    raw = update if isinstance(update, bytes) else json.dumps(update).encode()
    return http("POST", f"{gateway.url}/telegram/webhook", raw=raw, headers=headers)[0]


def test_a_webhook_message_is_answered_once_as_a_reply(
    gateway: GatewayProcess, model_server: FakeModelServer, telegram: FakeTelegram
) -> None:
    model_server.script("Hello <friend> & **welcome**")
    update = _text("are you there?")
    assert _post(gateway, update) == 200
    assert _post(gateway, update) == 200  # Telegram resends: the same update_id
    [sent] = telegram.wait_for("sendMessage", 1)
    assert sent["chat_id"] == str(ALICE)
    assert sent["parse_mode"] == "HTML"
    assert sent["text"] == "Hello &lt;friend&gt; &amp; <b>welcome</b>"
    assert sent["reply_parameters"]["message_id"] == update["message"]["message_id"]
    time.sleep(1.5)
    assert len(telegram.called("sendMessage")) == 1
    assert model_server.user_texts() == ["are you there?"]


def test_wrong_or_missing_secret_and_bad_bodies_are_refused(
    gateway: GatewayProcess, model_server: FakeModelServer, telegram: FakeTelegram
) -> None:
    update = _text("let me in")
    assert _post(gateway, update, secret="wrong") == 401
    assert _post(gateway, update, secret=None) == 401
    assert _post(gateway, b"{not json") == 400
    assert _post(gateway, [1, 2]) == 400
    assert _post(gateway, {"message": {"text": "no update id"}}) == 400
    assert _post(gateway, {"pad": "x" * (1024 * 1024 + 10)}) == 413
    time.sleep(1)
    assert model_server.requests == []
    assert telegram.called("sendMessage") == []
    # The refused update is still answered when it comes with the right secret.
    model_server.script("now you are in")
    assert _post(gateway, update) == 200
    assert telegram.wait_for("sendMessage", 1)[0]["text"] == "now you are in"


def test_an_approval_is_pressed_on_the_keyboard_and_the_tool_runs_once(
    gateway: GatewayProcess, model_server: FakeModelServer, telegram: FakeTelegram
) -> None:
    model_server.script(
        tool_call("run_command", {"command": "echo from-telegram"}),
        "The command said from-telegram.",
    )
    assert _post(gateway, _text("group chatter, not for the bot", chat=GROUP)) == 200
    assert _post(gateway, _text(f"@{BOT_USERNAME} run the echo", chat=GROUP)) == 200
    [prompt] = telegram.wait_for("sendMessage", 1)
    keyboard = prompt["reply_markup"]["inline_keyboard"]
    labels = [b["text"] for row in keyboard for b in row]
    assert labels == ["Approve", "Allow in this conversation", "Deny"]
    approve = keyboard[0][0]["callback_data"]
    assert approve.startswith("ap:ap_")
    shown = telegram.delivered[0]
    # Someone else presses first: an alert for them alone, nothing runs.
    assert _post(gateway, _callback(approve, user=MALLORY, message=shown)) == 200
    [refused] = telegram.wait_for("answerCallbackQuery", 1)
    assert refused["show_alert"] in (True, "true")
    assert "may not decide" in refused["text"]
    assert model_server.user_texts() == ["run the echo"]  # the chatter was not answered
    # The requester approves: answered, the prompt edited, the tool runs, the reply follows.
    assert _post(gateway, _callback(approve, user=ALICE, message=shown)) == 200
    answers = telegram.wait_for("answerCallbackQuery", 2)
    assert "text" not in answers[1] or not answers[1]["text"]
    [edit] = telegram.wait_for("editMessageText", 1)
    assert edit["message_id"] == str(shown["message_id"])
    assert "telegram:5551234 approved run_command" in edit["text"]
    assert not edit.get("reply_markup")
    sent = telegram.wait_for("sendMessage", 2)
    assert sent[1]["text"] == "The command said from-telegram."
    assert "from-telegram" in model_server.requests[1]["messages"][-1]["content"]
    # A second press: answered (no endless spinner), nothing runs again.
    assert _post(gateway, _callback(approve, user=ALICE, message=shown)) == 200
    telegram.wait_for("answerCallbackQuery", 3)
    time.sleep(1)
    assert len(telegram.called("editMessageText")) == 1
    assert len(model_server.requests) == 2


def test_a_rate_limited_chat_does_not_delay_another_chat(
    gateway: GatewayProcess, model_server: FakeModelServer, telegram: FakeTelegram
) -> None:
    """Chat A's reply meets a 429 with retry_after=3; chat B's reply goes out meanwhile."""
    chat_a, chat_b = 7000001, 7000002
    telegram.limit_chat(chat_a, times=1, retry_after=3)
    model_server.script("answer")
    assert _post(gateway, _text("first", chat=chat_a, user=chat_a)) == 200
    deadline = time.monotonic() + 20
    while not telegram.called("sendMessage") and time.monotonic() < deadline:
        time.sleep(0.02)  # A has met its 429 (the fake records the attempt)
    model_server.script("answer")
    assert _post(gateway, _text("second", chat=chat_b, user=chat_b)) == 200
    deadline = time.monotonic() + 30
    while len(telegram.delivered) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [m["chat"]["id"] for m in telegram.delivered] == [chat_b, chat_a]


def test_a_long_reply_arrives_as_several_valid_html_messages(
    gateway: GatewayProcess, model_server: FakeModelServer, telegram: FakeTelegram
) -> None:
    code = "\n".join(f"line_{i} = compute({i}) & check({i}) < {i * 2}" for i in range(120))
    parts = []
    for index in range(4):
        parts.append(
            f"Part {index}: **bold** and [a link](https://example.com/{index}) " + "words " * 150
        )
        parts.append(f"```python\n{code}\n```")
    text = "\n\n".join(parts)
    assert len(text) > 10_000
    model_server.script(text)
    assert _post(gateway, _text("explain")) == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(telegram.delivered) < 4:
        time.sleep(0.1)
    time.sleep(1)
    delivered = telegram.delivered
    assert len(delivered) >= 4
    assert all(m["text"] for m in delivered)
    for message in delivered:
        # The fake refused anything Telegram would not parse; check the code survived whole.
        assert len(message["text"]) <= 4096
        assert message["html"].count("<pre>") == message["html"].count("</pre>")
        parse_html(message["html"])
    joined = "".join(m["text"] for m in delivered)
    assert joined.count("line_119 = compute(119) & check(119) < 238") == 4


def test_polling_loses_nothing_when_killed_right_after_a_batch_arrives(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    """SIGKILL right after getUpdates returned three updates, before any was stored: after a
    restart every one is answered, once."""
    process = _gateway(
        database_url,
        model_server,
        telegram,
        tmp_path,
        webhook=False,
        CHATGATE_TEST_FAULT="after_get_updates",
    )
    process.start()
    try:
        chats = (7100001, 7100002, 7100003)
        for chat in chats:
            telegram.queue_update(_text(f"hello from {chat}", chat=chat, user=chat))
        assert process.wait_exit(30) != 0  # killed by the fault point
        assert telegram.called("sendMessage") == []
        model_server.script("one", "two", "three")
        process.start(CHATGATE_TEST_FAULT="")
        telegram.wait_for("sendMessage", 3)
        time.sleep(1.5)
        assert sorted(int(m["chat_id"]) for m in telegram.called("sendMessage")) == list(chats)
        assert sorted(model_server.user_texts()) == sorted(f"hello from {c}" for c in chats)
        offsets = [c.get("offset") for c in telegram.called("getUpdates")]
        assert offsets[0] is None or offsets[0] == ""  # the first batch was never confirmed
        assert telegram.called("deleteWebhook")  # polling and a webhook exclude each other
    finally:
        process.stop()


def test_polling_answers_messages_and_button_presses(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    process = _gateway(database_url, model_server, telegram, tmp_path, webhook=False)
    process.start()
    try:
        model_server.script(tool_call("run_command", {"command": "echo polled"}), "It said polled.")
        telegram.queue_update(_text("run it"))
        [prompt] = telegram.wait_for("sendMessage", 1)
        approve = prompt["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        telegram.queue_update(_callback(approve, user=ALICE, message=telegram.delivered[0]))
        telegram.wait_for("answerCallbackQuery", 1)
        sent = telegram.wait_for("sendMessage", 2)
        assert sent[1]["text"] == "It said polled."
        # The webhook route is closed in polling mode.
        assert _post(process, _text("x")) == 404
    finally:
        process.stop()


def test_jobs_has_buttons_that_pause_and_delete(
    gateway: GatewayProcess, model_server: FakeModelServer, telegram: FakeTelegram
) -> None:
    model_server.script(
        tool_call("schedule_task", {"prompt": "report", "schedule": "0 9 * * 1-5"}), "Scheduled."
    )
    assert _post(gateway, _text("every weekday at 9")) == 200
    telegram.wait_for("sendMessage", 1)
    assert _post(gateway, _text("/jobs")) == 200
    listing = telegram.wait_for("sendMessage", 2)[1]
    [row] = listing["reply_markup"]["inline_keyboard"]
    assert [b["text"].split()[0] for b in row] == ["Pause", "Delete"]
    pause = row[0]["callback_data"]
    shown = telegram.delivered[1]
    # Someone else may not pause it: an alert.
    assert _post(gateway, _callback(pause, user=MALLORY, message=shown)) == 200
    [refused] = telegram.wait_for("answerCallbackQuery", 1)
    assert "only telegram:5551234" in refused["text"]
    # Its creator may: the listing is redrawn in place with Resume.
    assert _post(gateway, _callback(pause, user=ALICE, message=shown)) == 200
    [edit] = telegram.wait_for("editMessageText", 1)
    assert edit["message_id"] == str(shown["message_id"])
    [redrawn] = edit["reply_markup"]["inline_keyboard"]
    assert [b["text"].split()[0] for b in redrawn] == ["Resume", "Delete"]
    assert "paused" in edit["text"]


def test_one_gateway_polls_and_another_takes_over_when_it_dies(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    """Two polling gateways on one database: one polls (Telegram would refuse two), and when
    it is killed the other starts polling and answers."""
    first = _gateway(database_url, model_server, telegram, tmp_path / "a", webhook=False)
    second = _gateway(database_url, model_server, telegram, tmp_path / "b", webhook=False)
    for process in (first, second):
        process.workdir.mkdir()
        process.start()
    try:
        model_server.script("first answer", "second answer")
        telegram.queue_update(_text("one"))
        telegram.wait_for("sendMessage", 1)
        time.sleep(1)
        assert telegram.conflicts == 0
        holder = first if "holding" in first.log else second
        assert "holding" not in (second if holder is first else first).log
        holder.kill()
        telegram.queue_update(_text("two"))
        sent = telegram.wait_for("sendMessage", 2, timeout=30)
        assert [m["text"] for m in sent] == ["first answer", "second answer"]
        assert telegram.conflicts == 0
    finally:
        first.kill()
        second.kill()


def test_with_self_approve_off_the_requester_is_refused_and_an_admin_runs_it_once(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    """A policy with ``self_approve = false``: the requester's own press gets an alert and
    runs nothing, and so does ``/approve ID``; an admin's press runs the command once."""
    admin = 4440000
    (tmp_path / "chatgate.toml").write_text(
        '[[policy]]\ntool = "run_command"\ndecision = "ask"\nself_approve = false\n'
    )
    gateway = _gateway(
        database_url,
        model_server,
        telegram,
        tmp_path,
        CHATGATE_ADMINS=f"telegram:{admin}",
        CHATGATE_CONFIG=str(tmp_path / "chatgate.toml"),
    )
    model_server.script(
        tool_call("run_command", {"command": "echo ran >> runs; cat runs"}), "Ran it."
    )
    gateway.start()
    try:
        assert _post(gateway, _text(f"@{BOT_USERNAME} run it", chat=GROUP)) == 200
        [prompt] = telegram.wait_for("sendMessage", 1)
        approve = prompt["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        shown = telegram.delivered[0]
        assert _post(gateway, _callback(approve, user=ALICE, message=shown)) == 200
        [refused] = telegram.wait_for("answerCallbackQuery", 1)
        assert "policy needs someone else to approve it" in refused["text"]
        approval_id = approve.split(":", 1)[1]
        command = f"/approve@{BOT_USERNAME} {approval_id}"
        assert _post(gateway, _text(command, chat=GROUP)) == 200
        [told] = telegram.wait_for("sendMessage", 2)[1:]
        assert "policy needs someone else to approve it" in told["text"]
        time.sleep(1)
        assert len(model_server.requests) == 1
        assert _post(gateway, _callback(approve, user=admin, message=shown)) == 200
        [edit] = telegram.wait_for("editMessageText", 1)
        assert f"telegram:{admin} approved run_command" in edit["text"]
        sent = telegram.wait_for("sendMessage", 3)
        assert sent[2]["text"] == "Ran it."
        assert model_server.requests[1]["messages"][-1]["content"] == "exit code 0\nran\n"
        time.sleep(1)
        assert len(model_server.requests) == 2
    finally:
        gateway.stop()


def test_updates_waiting_at_telegram_while_none_arrive_make_the_gateway_deaf(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    """Webhook mode: Telegram holds updates for the bot (its webhook fails) and none
    reach the gateway: /readyz names Telegram deaf (still 200), the log has Telegram's
    last error, doctor says since when; when deliveries come through it hears again."""
    process = _gateway(
        database_url, model_server, telegram, tmp_path, CHATGATE_DEAF_CHECK_SECONDS="1"
    )
    process.start()
    try:
        telegram.webhook |= {"url": "https://elsewhere.example/hook", "secret": "x"}
        telegram.webhook["last_error_message"] = "Connection timed out"
        for _ in range(3):
            telegram.queue_update(_text("lost on the way"))
        deadline = time.monotonic() + 20
        while http("GET", f"{process.url}/readyz")[1]["deaf"] != ["telegram"]:
            assert time.monotonic() < deadline, process.log
            time.sleep(0.1)
        status, body = http("GET", f"{process.url}/readyz")
        assert status == 200, body
        reason = body["platforms"]["telegram"]["reason"]
        assert "3 updates wait at Telegram" in reason, body
        assert "Connection timed out" not in reason  # /readyz is public
        assert "Connection timed out" in process.log
        assert body["platforms"]["telegram"]["deaf_since"] is not None
        doctor = subprocess.run(
            [str(CHATGATE), "doctor"],
            env=process.environment(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "telegram inbound" in doctor.stdout, doctor.stdout + doctor.stderr
        assert "deaf since" in doctor.stdout
        telegram.clear_updates()
        assert _post(process, _text("hello again")) == 200
        deadline = time.monotonic() + 20
        while http("GET", f"{process.url}/readyz")[1]["deaf"]:
            assert time.monotonic() < deadline, process.log
            time.sleep(0.1)
        assert "platform deaf" in process.log
    finally:
        process.stop()


def test_forget_me_asks_with_buttons_and_only_the_asker_can_erase(
    gateway: GatewayProcess,
    model_server: FakeModelServer,
    database_url: str,
    telegram: FakeTelegram,
) -> None:
    """``forget me``: a question with Erase / Keep on the keyboard; another person's press
    is refused (an alert) and erases nothing; the asker's Erase erases them and the
    question is edited to the receipt."""
    model_server.script("Noted.")
    assert _post(gateway, _text("my locker code is tangerine42")) == 200
    telegram.wait_for("sendMessage", 1)
    assert _post(gateway, _text("forget me")) == 200
    question = telegram.wait_for("sendMessage", 2)[1]
    [row] = question["reply_markup"]["inline_keyboard"]
    assert [b["text"] for b in row] == ["Erase my data", "Keep it"]
    erase = row[0]["callback_data"]
    shown = telegram.delivered[1]
    assert _post(gateway, _callback(erase, user=MALLORY, message=shown)) == 200
    [refused] = telegram.wait_for("answerCallbackQuery", 1)
    assert "Only the person who asked" in refused["text"]
    assert "messages.text" in columns_holding(database_url, "tangerine42")
    assert _post(gateway, _callback(erase, user=ALICE, message=shown)) == 200
    [edit] = telegram.wait_for("editMessageText", 1)
    assert edit["message_id"] == str(shown["message_id"])
    # Her two messages (the second: "forget me") and the reply to the first.
    assert "Erased telegram:5551234's data: 3 messages" in edit["text"]
    assert "reply_markup" not in edit or not edit["reply_markup"]
    assert columns_holding(database_url, "tangerine42") == []
