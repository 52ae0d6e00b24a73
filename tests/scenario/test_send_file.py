"""``send_file`` through ``chatgate gateway``: a PNG that ``run_command`` made in the
conversation's sandbox (real bubblewrap) reaches Slack (``files_upload_v2`` into the
thread), Telegram (``sendPhoto``), Discord (an attachment) and the web chat (a download
link), byte for byte; a path that leaves the sandbox is refused. Killed between the upload
and its receipt, the call made again finds the delivery where the platform can say
(Slack by looking, Discord by the nonce, the web chat by content) and delivers nothing
twice."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.files import png
from tests.fakes.gateway import GatewayProcess, http, upload
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.scenario.test_approvals_api import tool_call
from tests.scenario.test_slack import CHANNEL, _mention, _post_event
from tests.scenario.test_streaming import _wait
from tests.scenario.test_telegram import _post, _text

pytestmark = pytest.mark.any_database

PICTURE = png(8, 6, (10, 120, 200))
MAKE = f"echo {base64.b64encode(PICTURE).decode()} | base64 -d > chart.png && ls -l chart.png"
ALLOW = '[[policy]]\ntool = "run_command"\ndecision = "allow"\n'


def _gateway(
    database_url: str, model_server: FakeModelServer, platform: Any, tmp_path: Path
) -> GatewayProcess:
    (tmp_path / "chatgate.toml").write_text(ALLOW)
    return GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_CONFIG=str(tmp_path / "chatgate.toml"),
        CHATGATE_STREAM_REPLIES="false",
        **(platform.settings() if platform is not None else {}),
        **model_server.settings(),
    )


def _script(model_server: FakeModelServer) -> None:
    model_server.script(
        tool_call("run_command", {"command": MAKE}),
        tool_call("send_file", {"path": "/scratch/chart.png", "caption": "the chart"}, "c2"),
        "Here it is.",
    )


def _tool_results(model_server: FakeModelServer) -> list[str]:
    last = model_server.requests[-1]["messages"]
    return [str(m["content"]) for m in last if m["role"] == "tool"]


def test_slack_gets_the_png_in_the_thread(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, slack, tmp_path)
    gateway.start()
    try:
        _script(model_server)
        assert _post_event(gateway, _mention("draw it", ts="1700001000.000100"))[0] == 200
        slack.wait_for("chat.postMessage", 1)
        [upload] = slack.uploads.values()
        assert upload["data"] == PICTURE
        assert upload["name"] == "chart.png"
        [shared] = [m for m in slack.messages if m.get("files")]
        assert shared["thread_ts"] == "1700001000.000100"
        assert shared["channel"] == CHANNEL
        assert shared["text"] == "the chart"
        assert "Sent chart.png (image/png" in _tool_results(model_server)[-1]
        assert slack.posted()[-1]["text"] == "Here it is."
    finally:
        gateway.stop()


def test_telegram_gets_a_photo_and_discord_an_attachment(
    database_url: str,
    model_server: FakeModelServer,
    telegram: FakeTelegram,
    discord: FakeDiscord,
    tmp_path: Path,
) -> None:
    (tmp_path / "t").mkdir()
    on_telegram = _gateway(database_url, model_server, telegram, tmp_path / "t")
    on_telegram.start()
    try:
        _script(model_server)
        assert _post(on_telegram, _text("draw it")) == 200
        telegram.wait_for("sendMessage", 1)
        [sent] = telegram.sent_files
        assert sent["kind"] == "photo"
        assert sent["data"] == PICTURE
        assert sent["caption"] == "the chart"
    finally:
        on_telegram.stop()
    (tmp_path / "d").mkdir()
    on_discord = _gateway(database_url, model_server, discord, tmp_path / "d")
    on_discord.start()
    discord.wait_connected()
    try:
        _script(model_server)
        discord.message_create("draw it", mention=True)
        _wait(lambda: any(m["content"] == "Here it is." for m in discord.created))
        [sent] = discord.sent_files
        assert sent["data"] == PICTURE
        assert sent["filename"] == "chart.png"
        [carrier] = [m for m in discord.created if m["attachments"]]
        assert carrier["content"] == "the chart"
    finally:
        on_discord.stop()


def test_web_chat_shows_a_download_link_and_a_path_out_of_the_sandbox_is_refused(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, None, tmp_path)
    gateway.start(command="run")
    try:
        _script(model_server)
        status, accepted = http(
            "POST", f"{gateway.url}/api/messages", body={"conversation": "art", "text": "draw"}
        )
        assert status == 202
        conversation = accepted["conversation_id"]
        items = _until(gateway, conversation, lambda items: items[-1]["role"] == "assistant")
        [note] = [item for item in items if item.get("file")]
        assert note["text"] == f"Sent chart.png ({len(PICTURE)} bytes)."
        assert note["file"]["content_type"] == "image/png"
        raw = _download(gateway, note["file"]["url"])
        assert raw == PICTURE

        # A link out of the sandbox, and .., are refused: nothing is sent.
        model_server.script(
            tool_call("run_command", {"command": "ln -s /etc/passwd leak"}),
            tool_call("send_file", {"path": "leak"}, "c2"),
            tool_call("send_file", {"path": "../other/secret"}, "c3"),
            tool_call("send_file", {"path": "/etc/passwd"}, "c4"),
            "Could not.",
        )
        http("POST", f"{gateway.url}/api/messages", body={"conversation": "art", "text": "x"})
        items = _until(gateway, conversation, lambda items: items[-1]["text"] == "Could not.")
        results = _tool_results(model_server)
        assert "a symbolic link is not followed" in results[-3]
        assert "a path with .. is not allowed" in results[-2]
        assert "is not in this conversation's sandbox" in results[-1]
        assert len([item for item in items if item.get("file")]) == 1
    finally:
        gateway.stop()


def _until(gateway: GatewayProcess, conversation: str, done: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        status, body = http("GET", f"{gateway.url}/api/conversations/{conversation}/messages")
        assert status == 200, body
        if body["items"] and done(body["items"]):
            return list(body["items"])
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


def _download(gateway: GatewayProcess, path: str) -> bytes:
    import urllib.request

    with urllib.request.urlopen(f"{gateway.url}{path}", timeout=10) as response:
        assert response.headers["Content-Type"] == "image/png"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        data: bytes = response.read()
        return data


CSV = b"region,revenue\nnorth,4242\n"


def _send_back(model_server: FakeModelServer) -> None:
    model_server.script(
        tool_call("send_file", {"path": "/files/revenue.csv", "caption": "back to you"}),
        "Sent.",
    )


@pytest.mark.parametrize("platform", ["slack", "discord", "web"])
def test_killed_between_the_upload_and_its_receipt_the_file_is_delivered_once(
    platform: str,
    database_url: str,
    model_server: FakeModelServer,
    slack: FakeSlack,
    discord: FakeDiscord,
    tmp_path: Path,
) -> None:
    """The person's own file sent back; the gateway dies right after the platform took it
    (before the tool's result is journaled). After the restart the call runs again, finds
    the delivery, and the conversation holds one copy."""
    fake: Any = {"slack": slack, "discord": discord, "web": None}[platform]
    gateway = _gateway(database_url, model_server, fake, tmp_path)
    command = "run" if platform == "web" else "gateway"
    gateway.start(command=command, CHATGATE_TEST_FAULT="after_tool_run")
    _send_back(model_server)
    conversation = ""
    if platform == "slack":
        event = _mention("send it back", ts="1700001100.000100")
        event["event"]["files"] = [slack.add_file("revenue.csv", CSV, mimetype="text/csv")]
        assert _post_event(gateway, event)[0] == 200
    elif platform == "discord":
        discord.wait_connected()
        attachment = discord.attachment("revenue.csv", CSV, content_type="text/csv")
        discord.message_create("send it back", mention=True, attachments=[attachment])
    else:
        status, uploaded = upload(gateway, "revenue.csv", CSV)
        assert status == 201
        body = {"conversation": "back", "text": "send it back",
                "attachments": [{"id": uploaded["id"], "name": "revenue.csv"}]}  # fmt: skip
        status, accepted = http("POST", f"{gateway.url}/api/messages", body=body)
        conversation = accepted["conversation_id"]
    assert gateway.wait_exit() == -9, gateway.log
    gateway.start(command=command)
    try:
        if platform == "slack":
            slack.wait_for("chat.postMessage", 1)
            assert [m["data"] for m in slack.uploads.values()] == [CSV]
            assert len([m for m in slack.messages if m.get("files")]) == 1
        elif platform == "discord":
            discord.wait_connected()
            _wait(lambda: any(m["content"] == "Sent." for m in discord.created))
            assert [f["data"] for f in discord.sent_files] == [CSV]
            assert len([m for m in discord.created if m["attachments"]]) == 1
        else:
            items = _until(gateway, conversation, lambda items: items[-1]["text"] == "Sent.")
            assert len([item for item in items if item.get("file")]) == 1
        assert len(model_server.requests) == 2  # the call to send, and the answer after it
    finally:
        gateway.stop()


def test_on_telegram_a_send_cut_off_is_not_repeated_unasked(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    """Telegram cannot be asked whether a file arrived: after the kill the turn asks the
    person (Run it again? Retry or Skip) instead of sending a second copy on its own."""
    gateway = _gateway(database_url, model_server, telegram, tmp_path)
    gateway.start(CHATGATE_TEST_FAULT="after_tool_run")
    _send_back(model_server)
    file_id = telegram.add_file(CSV, path="documents/revenue.csv")
    update = _text("send it back")
    message = update["message"]
    message["caption"] = message.pop("text")
    message["document"] = {"file_id": file_id, "file_unique_id": "u", "file_name": "revenue.csv"}
    assert _post(gateway, update) == 200
    assert gateway.wait_exit() == -9, gateway.log
    gateway.start()
    try:
        [prompt] = telegram.wait_for("sendMessage", 1)
        assert "send_file" in prompt["text"]
        assert "Run send_file again?" in prompt["text"]
        assert "/files/revenue.csv" in prompt["text"]
        keyboard = prompt["reply_markup"]
        keyboard = json.loads(keyboard) if isinstance(keyboard, str) else keyboard
        labels = [b["text"] for row in keyboard["inline_keyboard"] for b in row]
        assert labels == ["Retry", "Skip"]
        time.sleep(1.0)
        assert len(telegram.sent_files) == 1  # the one before the kill; none since
    finally:
        gateway.stop()
