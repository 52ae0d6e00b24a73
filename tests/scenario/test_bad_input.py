"""No 500 for any input: every route that takes a body answers 4xx to JSON nested 200,000
deep, a lone surrogate, a NUL and bytes that are not UTF-8 (a Slack body is refused after
its signature is checked, never decoded before); a Telegram update that cannot be handled
is set aside and the next one is answered. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from agent_core.storage.database import Database
from agent_core.storage.schema import dead_letters
from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import SIGNING_SECRET, FakeSlack
from tests.fakes.telegram_server import WEBHOOK_SECRET, FakeTelegram
from tests.scenario.conftest import ClientFactory

BODIES = {
    "deep": b"[" * 200_000 + b"]" * 200_000,
    "deep-object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "lone-surrogate": b'{"conversation": "x", "text": "\\ud800", "decision": "approve"}',
    "nul": b'{"conversation": "x", "text": "a\\u0000b", "decision": "approve"}',
    "not-utf8": b'{"conversation": "x", "text": "\xff\xfe\xc3"}',
    "nul-key": b'{"conversation\\u0000": "x", "text": "y"}',
}


def _slack_headers(body: bytes) -> dict[str, str]:
    timestamp = str(int(time.time()))
    digest = hmac.new(SIGNING_SECRET.encode(), b"v0:" + timestamp.encode() + b":" + body, "sha256")
    return {
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
    }


@pytest.fixture
def platforms() -> Iterator[tuple[FakeSlack, FakeTelegram]]:
    with FakeSlack() as slack, FakeTelegram() as telegram:
        yield slack, telegram


async def test_every_route_with_a_body_answers_4xx_never_500(
    platforms: tuple[FakeSlack, FakeTelegram],
    make_client: ClientFactory,
    model_server: FakeModelServer,
) -> None:
    slack, telegram = platforms
    client = await make_client(
        model_server,
        CHATGATE_ACCESS="open",
        **slack.settings(),
        **telegram.settings(webhook=True),
    )
    for kind, body in BODIES.items():
        await _each_route_refuses(client, kind, body)
    # A body that is not what its Content-Encoding says (aiohttp cannot inflate it).
    for encoding in ("gzip", "deflate"):
        await _each_route_refuses(
            client,
            encoding,
            b'{"conversation": "x", "text": "y", "decision": "approve"}',
            encoding=encoding,
        )
    # Still serving, nothing stored from any of it.
    listed = await client.get("/api/conversations")
    assert listed.status == 200
    assert await listed.json() == []


async def _each_route_refuses(
    client: Any, kind: str, body: bytes, *, encoding: str | None = None
) -> None:
    json_type = {"Content-Type": "application/json"}
    routes: list[tuple[str, dict[str, str], bytes]] = [
        ("/api/messages", json_type, body),
        ("/api/approvals/ap_0123456789ab", json_type, body),
        ("/api/schedules/sc_00aa11bb", json_type, body),
        ("/api/pairing/ABCD-EFGH", json_type, body),
        ("/slack/events", {**json_type, **_slack_headers(body)}, body),
        (
            "/slack/events",
            {
                "Content-Type": "application/x-www-form-urlencoded",
                **_slack_headers(b"payload=" + body),
            },
            b"payload=" + body,
        ),
        (
            "/telegram/webhook",
            {**json_type, "X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET},
            body,
        ),
    ]
    for path, headers, data in routes:
        if encoding is not None:
            # aiohttp drops the connection after a body it could not inflate.
            headers = {**headers, "Content-Encoding": encoding, "Connection": "close"}
        response = await client.post(path, data=data, headers=headers)
        assert 400 <= response.status < 500, (kind, path, response.status)
        assert (await response.json())["error"]


def test_a_poisoned_telegram_update_is_set_aside_and_the_next_is_answered(
    database_url: str, model_server: FakeModelServer, tmp_path: Path
) -> None:
    """Long polling: an update with a NUL in its text is kept as a dead letter (metric,
    log line), and the message after it is answered; polling does not retry it forever."""
    model_server.script("the next one is answered")
    with FakeTelegram() as telegram:
        gateway = GatewayProcess(
            database_url=database_url,
            workdir=tmp_path,
            CHATGATE_ACCESS="open",
            **telegram.settings(webhook=False),
            **model_server.settings(),
        )
        gateway.start()
        try:
            chat = {"id": 4242, "type": "private"}
            person = {"id": 4242, "is_bot": False, "first_name": "P"}
            now = int(time.time())
            poisoned = {
                "message": {
                    "message_id": 1,
                    "date": now,
                    "chat": chat,
                    "from": person,
                    "text": "bad\x00text",
                }
            }
            fine = {
                "message": {
                    "message_id": 2,
                    "date": now,
                    "chat": chat,
                    "from": person,
                    "text": "hello after it",
                }
            }
            first = telegram.queue_update(poisoned)
            telegram.queue_update(fine)
            [sent] = telegram.wait_for("sendMessage", 1)
            assert sent["text"] == "the next one is answered"
            assert model_server.user_texts() == ["hello after it"]
            assert "telegram update set aside as dead" in gateway.log
            metrics = _metrics(gateway)
            assert 'chatgate_dead_letters_total{platform="telegram"} 1.0' in metrics
        finally:
            gateway.stop()
    rows = _dead_letters(database_url)
    assert [(r.platform, r.event_id) for r in rows] == [("telegram", str(first))]
    assert "NUL" in rows[0].error
    assert "bad\\u0000text" in rows[0].raw


def _metrics(gateway: GatewayProcess) -> str:
    status, text = http("GET", f"{gateway.url}/metrics")
    assert status == 200
    return str(text)


def _dead_letters(database_url: str) -> list[Any]:
    async def read() -> list[Any]:
        database = Database(database_url)
        try:
            return await database.read(lambda conn: list(conn.execute(select(dead_letters))))
        finally:
            await database.dispose()

    return asyncio.run(read())


async def _raw(port: int, request: bytes) -> int:
    """Send bytes as they are (a client library would refuse these headers); the status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1])


async def test_odd_header_bytes_and_numbers_get_4xx_not_500(
    platforms: tuple[FakeSlack, FakeTelegram],
    make_client: ClientFactory,
    model_server: FakeModelServer,
) -> None:
    """A signature, secret or token header with a byte that is not UTF-8, a timestamp of
    digits that are not ASCII or far too many, and ids past 64 bits: 4xx each time."""
    slack, telegram = platforms
    client = await make_client(
        model_server,
        CHATGATE_METRICS_TOKEN="metrics-token-0123456789",
        **slack.settings(),
        **telegram.settings(webhook=True),
    )
    port = client.server.port
    assert port is not None
    body = b'{"type": "event_callback"}'
    for path, header in (
        ("/slack/events", b"X-Slack-Signature: v0=\xff\xfe"),
        ("/slack/events", "X-Slack-Request-Timestamp: ²³".encode()),
        ("/slack/events", b"X-Slack-Request-Timestamp: " + b"9" * 5000),
        ("/telegram/webhook", b"X-Telegram-Bot-Api-Secret-Token: \xff"),
    ):
        request = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n".encode()
            + header
            + b"\r\nConnection: close\r\n\r\n"
            + body
        )
        status = await _raw(port, request)
        assert status in (400, 401), (path, header[:40], status)
    metrics = (
        b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \xff\r\n"
        b"Connection: close\r\n\r\n"
    )
    assert await _raw(port, metrics) == 401
    web = await client.post("/api/messages", json={"conversation": "x", "text": "hi"})
    conversation = (await web.json())["conversation_id"]
    huge = 2**63
    after = await client.get(f"/api/conversations/{conversation}/messages?after={huge}")
    assert after.status == 400
    listing = await client.post(
        "/api/schedules/sc_00aa11bb", json={"action": "pause", "message_id": huge}
    )
    assert listing.status == 400
