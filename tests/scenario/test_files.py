"""Files people send, through ``chatgate gateway`` with the real SDKs against the fake
platforms and the real litellm against the fake model: a photo reaches a model that sees
images as an image part (the file's exact bytes) and another model as a line saying what
it is; a CSV is inlined; a PDF's and a Word document's text reach the model; a file over
the cap is never downloaded and the reply says it was not read. Slack's download carries
the bot token; Telegram's goes through getFile; the web chat uploads first."""

from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.discord_server import FakeDiscord
from tests.fakes.files import docx, ogg, pdf, png
from tests.fakes.gateway import GatewayProcess, http, upload
from tests.fakes.model_server import FakeModelServer
from tests.fakes.s3_server import FakeS3
from tests.fakes.slack_server import TOKEN, FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.scenario.test_slack import _mention, _post_event
from tests.scenario.test_streaming import _gateway, _wait
from tests.scenario.test_telegram import _post, _text

pytestmark = pytest.mark.any_database

CSV = b"region,revenue\nnorth,4242\nsouth,1717\n"


def _user_message(model_server: FakeModelServer, index: int = -1) -> Any:
    request = model_server.requests[index]
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if part["type"] == "text")


def test_slack_photo_as_an_image_part_csv_inlined_and_a_huge_file_never_fetched(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, slack, tmp_path)
    gateway.start(CHATGATE_MODEL_VISION="true", CHATGATE_STREAM_REPLIES="false")
    try:
        model_server.script("I see a red square.", "Here is what I read.")
        picture = png()
        event = _mention("what is this?", ts="1700000900.000100")
        event["event"]["files"] = [slack.add_file("square.png", picture, mimetype="image/png")]
        assert _post_event(gateway, event)[0] == 200
        slack.wait_for("chat.postMessage", 1)
        content = _user_message(model_server)
        [image] = [part for part in content if part["type"] == "image_url"]
        url = image["image_url"]["url"]
        assert url == "data:image/png;base64," + base64.b64encode(picture).decode()
        assert "[Attached image: square.png (image/png" in _text_of(content)
        [download] = slack.called("download")
        assert download["auth"] == f"Bearer {TOKEN}"

        # A CSV beside a file declared at 200 MB: the CSV is read, the big one never
        # fetched, and the reply says which was not read and why.
        event = _mention("sum these", ts="1700000901.000100", event_id="EvFiles2")
        event["event"]["files"] = [
            slack.add_file("revenue.csv", CSV, mimetype="text/csv"),
            slack.add_file("dump.zip", 200 * 1024 * 1024, mimetype="application/zip"),
        ]
        assert _post_event(gateway, event)[0] == 200
        slack.wait_for("chat.postMessage", 2)
        text = _text_of(_user_message(model_server))
        assert "north,4242" in text
        assert "south,1717" in text
        assert "[Attached file: dump.zip. Not read: 200.0 MB is over the 25.0 MB limit" in text
        assert len(slack.called("download")) == 2  # the PNG and the CSV; not the zip
        assert not any("dump.zip" in path for path in slack.served)
        reply = slack.posted()[-1]["text"]
        assert reply.startswith("Here is what I read.")
        assert "Not read: dump.zip (200.0 MB is over the 25.0 MB limit for one file)" in reply
    finally:
        gateway.stop()


def test_telegram_pdf_text_reaches_the_model_and_a_photo_is_described_to_a_blind_model(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, telegram, tmp_path)
    gateway.start(CHATGATE_MODEL_VISION="false", CHATGATE_STREAM_REPLIES="false")
    try:
        model_server.script("The report says 4242.", "A photo.")
        file_id = telegram.add_file(pdf("Quarterly revenue was 4242"), path="documents/q3.pdf")
        update = _text("what does it say?")
        message = update["message"]
        message["caption"] = message.pop("text")
        message["document"] = {"file_id": file_id, "file_unique_id": "u1",
                               "file_name": "q3.pdf", "mime_type": "application/pdf"}  # fmt: skip
        assert _post(gateway, update) == 200
        telegram.wait_for("sendMessage", 1)
        text = _text_of(_user_message(model_server))
        assert "what does it say?" in text
        assert "[Attached file: q3.pdf (application/pdf" in text
        assert "Quarterly revenue was 4242" in text
        assert telegram.called("getFile")[0]["file_id"] == file_id

        photo_id = telegram.add_file(png(), path="photos/p.jpg")
        update = _text("and this?")
        update["message"]["photo"] = [
            {"file_id": photo_id, "file_unique_id": "u2", "width": 4, "height": 3}
        ]
        assert _post(gateway, update) == 200
        telegram.wait_for("sendMessage", 2)
        content = _user_message(model_server)
        assert isinstance(content, str)  # no image part for a model that cannot see
        assert "photo.jpg (image/png" in content  # the type is the content's, not the name's
        assert "This model cannot see images." in content
    finally:
        gateway.stop()


def test_discord_word_document_read_and_files_stay_with_their_conversation(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, discord, tmp_path)
    gateway.start(CHATGATE_STREAM_REPLIES="false")
    discord.wait_connected()
    try:
        model_server.script("Read it.")
        document = docx("The launch is on Tuesday.", "Bring snacks.")
        kind = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
        attachment = discord.attachment("plan.docx", document, content_type=kind)
        discord.message_create("summarise", mention=True, attachments=[attachment])
        _wait(lambda: len(discord.created) == 1)
        text = _text_of(_user_message(model_server))
        assert "The launch is on Tuesday.\nBring snacks." in text
        state = tmp_path / "state"
        [kept] = [p for p in (state / "files").glob("??/*")]
        assert kept.read_bytes() == document
        assert oct(kept.stat().st_mode & 0o777) == "0o444"
    finally:
        gateway.stop()


def test_web_upload_then_message_and_an_upload_over_the_cap_is_413(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    gateway = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_STATE_DIR=str(tmp_path / "state"),
        CHATGATE_FILE_MAX_MB="1",
        **model_server.settings(),
    )
    gateway.start(command="run")
    try:
        model_server.script("Two regions.")
        status, body = upload(gateway, "revenue.csv", CSV)
        assert status == 201, body
        assert body["size"] == len(CSV)
        assert body["name"] == "revenue.csv"
        message = {"conversation": "files", "text": "how many regions?",
                   "attachments": [{"id": body["id"], "name": "revenue.csv"}]}  # fmt: skip
        status, accepted = http("POST", f"{gateway.url}/api/messages", body=message)
        assert status == 202, accepted
        model_server.wait_for_requests(1)
        assert "north,4242" in _text_of(_user_message(model_server))

        status, body = upload(gateway, "big.bin", bytes(1024 * 1024 + 1))
        assert status == 413
        assert "1 MB" in body["error"]
        uploads = tmp_path / "state" / "uploads"
        assert len(list(uploads.iterdir())) == 1  # only the CSV; nothing of the big one
        bare = {"Content-Type": "multipart/form-data; boundary=x"}  # what a forged form sends
        assert http("POST", f"{gateway.url}/api/uploads", raw=b"--x--", headers=bare)[0] == 403
        bad = {"conversation": "files", "text": "x", "attachments": [{"id": "../../etc/passwd"}]}
        assert http("POST", f"{gateway.url}/api/messages", body=bad)[0] == 400
    finally:
        gateway.stop()


def test_killed_after_a_file_is_stored_it_is_not_fetched_again(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """The attachment's row is the download's journal: a gateway SIGKILLed right after a
    file was stored fetches nothing again after its restart, and the turn then reads it
    from the store and answers once."""
    gateway = _gateway(database_url, model_server, slack, tmp_path)
    gateway.start(CHATGATE_TEST_FAULT="after_file_stored", CHATGATE_STREAM_REPLIES="false")
    try:
        model_server.script("Two regions.")
        event = _mention("how many regions?", ts="1700000950.000100")
        event["event"]["files"] = [slack.add_file("revenue.csv", CSV, mimetype="text/csv")]
        assert _post_event(gateway, event)[0] == 200
        assert gateway.wait_exit() == -9, gateway.log
        assert len(slack.called("download")) == 1
        assert not model_server.requests
        gateway.start(CHATGATE_STREAM_REPLIES="false")
        slack.wait_for("chat.postMessage", 1)
        time.sleep(1.0)
        assert len(slack.called("download")) == 1
        assert len(model_server.requests) == 1
        assert "north,4242" in _text_of(_user_message(model_server))
        assert [p["text"] for p in slack.posted()] == ["Two regions."]
    finally:
        gateway.stop()


def test_telegram_voice_note_is_transcribed_once_and_the_transcript_shown(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    gateway = _gateway(database_url, model_server, telegram, tmp_path)
    gateway.start(CHATGATE_TRANSCRIBE_MODEL="openai/whisper-1", CHATGATE_STREAM_REPLIES="false")
    try:
        model_server.script("I will remind you.")
        voice = ogg()
        file_id = telegram.add_file(voice, path="voice/file_7.oga")
        update = _text("x")
        message = update["message"]
        del message["text"]
        message["voice"] = {"file_id": file_id, "file_unique_id": "v1", "duration": 3,
                            "mime_type": "audio/ogg"}  # fmt: skip
        assert _post(gateway, update) == 200
        [sent] = telegram.wait_for("sendMessage", 1)
        [heard] = model_server.transcriptions
        assert heard["model"] == "whisper-1"
        assert heard["data"] == voice
        text = _text_of(_user_message(model_server))
        assert "[Attached audio: voice.ogg (audio/ogg" in text
        assert "please send the report on Monday" in text
        quoted = "<blockquote>🎤 voice.ogg: “please send the report on Monday”</blockquote>"
        assert sent["text"].startswith(quoted)  # shown first, as a quote
        assert sent["text"].rstrip().endswith("I will remind you.")
    finally:
        gateway.stop()


@pytest.mark.parametrize("platform", ["slack", "telegram", "discord", "web"])
def test_on_every_platform_a_photo_is_an_image_part_and_a_huge_file_is_not_fetched(
    platform: str,
    database_url: str,
    model_server: FakeModelServer,
    slack: FakeSlack,
    telegram: FakeTelegram,
    discord: FakeDiscord,
    tmp_path: Path,
) -> None:
    """The same message on each platform: a photo and a file declared (or, in the web
    chat, uploaded) past the cap. The vision model gets the photo's bytes as an image part;
    the big file is never downloaded (refused at upload in the web chat) and the reply
    names it."""
    fake: Any = {"slack": slack, "telegram": telegram, "discord": discord, "web": None}[platform]
    picture = png(5, 5, (1, 2, 3))
    huge = 30 * 1024 * 1024
    settings = {"CHATGATE_MODEL_VISION": "true", "CHATGATE_STREAM_REPLIES": "false"}
    if fake is not None:
        gateway = _gateway(database_url, model_server, fake, tmp_path)
        gateway.start(**settings)
    else:
        gateway = GatewayProcess(database_url=database_url, workdir=tmp_path,
                                 CHATGATE_STATE_DIR=str(tmp_path / "state"),
                                 **model_server.settings(), **settings)  # fmt: skip
        gateway.start(command="run")
    try:
        model_server.script("A small square.")
        if platform == "slack":
            event = _mention("what is this?", ts="1700002000.000100")
            event["event"]["files"] = [
                slack.add_file("square.png", picture, mimetype="image/png"),
                slack.add_file("backup.tar", huge, mimetype="application/x-tar"),
            ]
            assert _post_event(gateway, event)[0] == 200
            reply = lambda: slack.posted()[-1]["text"]  # noqa: E731
            slack.wait_for("chat.postMessage", 1)
        elif platform == "telegram":
            photo = telegram.add_file(picture, path="photos/p.jpg")
            big = telegram.add_file(huge, path="documents/backup.tar")
            update = _text("what is this?")
            update["message"]["photo"] = [{"file_id": photo, "file_unique_id": "p", "width": 5,
                                           "height": 5, "file_size": len(picture)}]  # fmt: skip
            assert _post(gateway, update) == 200
            # Telegram puts one file on a message: the big one comes as a second message.
            second = _text("and this")
            document = {"file_id": big, "file_unique_id": "b", "file_name": "backup.tar"}
            second["message"]["document"] = {**document, "file_size": huge}
            telegram.wait_for("sendMessage", 1)
            model_server.script("Too big.")
            assert _post(gateway, second) == 200
            telegram.wait_for("sendMessage", 2)
            reply = lambda: telegram.called("sendMessage")[-1]["text"]  # noqa: E731
        elif platform == "discord":
            discord.wait_connected()
            attachments = [
                discord.attachment("square.png", picture, content_type="image/png"),
                discord.attachment("backup.tar", huge, content_type="application/x-tar"),
            ]
            discord.message_create("what is this?", mention=True, attachments=attachments)
            _wait(lambda: len(discord.created) == 1)
            reply = lambda: discord.created[-1]["content"]  # noqa: E731
        else:
            status, uploaded = upload(gateway, "square.png", picture)
            assert status == 201
            status, _ = upload(gateway, "backup.tar", bytes(26 * 1024 * 1024))
            assert status == 413  # the web chat refuses it at the door: nothing is kept
            body = {"conversation": "pics", "text": "what is this?",
                    "attachments": [{"id": uploaded["id"], "name": "square.png"}]}  # fmt: skip
            assert http("POST", f"{gateway.url}/api/messages", body=body)[0] == 202
            model_server.wait_for_requests(1)
            reply = None
        request = model_server.requests[0]
        content = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
        [image] = [part for part in content if part["type"] == "image_url"]
        expected = "data:image/png;base64," + base64.b64encode(picture).decode()
        assert image["image_url"]["url"] == expected
        if reply is not None:
            assert (
                "Not read: backup.tar (30.0 MB is over the 25.0 MB limit for one file)" in reply()
            )
            served = fake.served
            assert not any("backup.tar" in path for path in served)
            assert not any("backup.tar" in str(call) for call in fake.called("download"))
    finally:
        gateway.stop()


def test_with_a_bucket_files_and_uploads_live_there_for_every_process(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """CHATGATE_FILES_S3_BUCKET (here a fake S3 on loopback, the real boto3): a Slack file
    and a web upload go to the bucket, not the state directory, and the model reads
    both from there; another gateway on another state directory reads them too."""
    with FakeS3() as s3:
        gateway = _gateway(database_url, model_server, slack, tmp_path / "one")
        (tmp_path / "one").mkdir()
        gateway.start(command="run", CHATGATE_STREAM_REPLIES="false", **s3.settings())
        try:
            model_server.script("Read it.", "Read that too.")
            event = _mention("sum these", ts="1700003000.000100")
            event["event"]["files"] = [slack.add_file("revenue.csv", CSV, mimetype="text/csv")]
            assert _post_event(gateway, event)[0] == 200
            slack.wait_for("chat.postMessage", 1)
            digest = hashlib.sha256(CSV).hexdigest()
            assert s3.keys("chatgate/files/") == [f"chatgate/files/{digest}"]
            assert not (tmp_path / "one" / "state" / "files").exists()
            assert "north,4242" in _text_of(_user_message(model_server))

            status, uploaded = upload(gateway, "more.csv", b"region,revenue\nwest,99\n")
            assert status == 201
            assert s3.keys("chatgate/uploads/") == [f"chatgate/uploads/{uploaded['id']}"]
            assert not list((tmp_path / "one" / "state" / "uploads").glob("*"))
        finally:
            gateway.stop()
        # Another gateway, its own state directory: the upload is the bucket's.
        (tmp_path / "two").mkdir()
        other = _gateway(database_url, model_server, slack, tmp_path / "two")
        other.start(command="run", CHATGATE_STREAM_REPLIES="false", **s3.settings())
        try:
            body = {"conversation": "bucket", "text": "and this",
                    "attachments": [{"id": uploaded["id"], "name": "more.csv"}]}  # fmt: skip
            assert http("POST", f"{other.url}/api/messages", body=body)[0] == 202
            model_server.wait_for_requests(2)
            assert "west,99" in _text_of(_user_message(model_server))
        finally:
            other.stop()


def test_a_strangers_file_is_never_downloaded(
    database_url: str, model_server: FakeModelServer, slack: FakeSlack, tmp_path: Path
) -> None:
    """Pairing mode: someone not let in shares a file with a mention. They get the
    pairing answer; no turn opens, so nothing is fetched and the model is not asked."""
    gateway = _gateway(database_url, model_server, slack, tmp_path)
    gateway.start(CHATGATE_ACCESS="pairing")
    try:
        event = _mention("read my file", ts="1700004000.000100", user="U0STRANGER")
        event["event"]["files"] = [slack.add_file("secret.csv", CSV, mimetype="text/csv")]
        assert _post_event(gateway, event)[0] == 200
        slack.wait_for("chat.postMessage", 1)  # the pairing answer
        time.sleep(1.5)
        assert slack.called("download") == []
        assert model_server.requests == []
    finally:
        gateway.stop()
