"""A platform that must be answered in time (Slack within 3 s, Telegram's webhook) is
told a message was received only once it is in the ingress ledger. When the database is
too slow for the deadline, the gateway answers an error instead (Slack and Telegram
deliver again); the gateway is killed before the message is stored, restarted, the
platform's next delivery is stored, and the message is answered once.

SQLite only: the test holds the database's write lock from outside to make it slow.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.gateway import GatewayProcess, http
from tests.fakes.journal import wait_all_settled
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import BOT_USER, TEAM, FakeSlack, signed_headers
from tests.fakes.telegram_server import WEBHOOK_SECRET, FakeTelegram

# About the adapters and the sink; it makes SQLite slow from outside: the SQLite pass runs it.
pytestmark = pytest.mark.any_database


@pytest.fixture
def platforms() -> Iterator[tuple[FakeSlack, FakeTelegram]]:
    with FakeSlack() as slack, FakeTelegram() as telegram:
        yield slack, telegram


@pytest.fixture
def gateway(
    database_url: str,
    model_server: FakeModelServer,
    platforms: tuple[FakeSlack, FakeTelegram],
    tmp_path: Path,
) -> Iterator[GatewayProcess]:
    slack, telegram = platforms
    process = GatewayProcess(
        database_url=database_url,
        workdir=tmp_path,
        CHATGATE_ACCESS="open",
        **slack.settings(),
        **telegram.settings(webhook=True),
        **model_server.settings(),
    )
    yield process
    process.stop()


def _telegram(gateway: GatewayProcess, update_id: int, text: str) -> tuple[int, float]:
    update = {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "chat": {"id": 4242, "type": "private", "first_name": "Tess"},
            "from": {"id": 4242, "is_bot": False, "first_name": "Tess"},
            "text": text,
        },
    }
    headers = {
        "Content-Type": "application/json",
        "X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET,
    }
    started = time.monotonic()
    status, _ = http(
        "POST",
        f"{gateway.url}/telegram/webhook",
        raw=json.dumps(update).encode(),
        headers=headers,
        timeout=30,
    )
    return status, time.monotonic() - started


def _slack(gateway: GatewayProcess, n: int, text: str, *, retry: int = 0) -> tuple[int, float]:
    ts = f"1700000{n:03d}.000100"
    raw = json.dumps(
        {
            "team_id": TEAM,
            "api_app_id": "A0CHATGATE",
            "type": "event_callback",
            "event_id": f"EvDeadline{n}",
            "event_time": int(time.time()),
            "event": {
                "type": "app_mention",
                "user": "U0ALICE",
                "text": f"<@{BOT_USER}> {text}",
                "ts": ts,
                "channel": "C0DEADLINE",
                "event_ts": ts,
            },
        }
    )
    headers = {"Content-Type": "application/json", **signed_headers(raw)}
    if retry:
        headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_error"}
    started = time.monotonic()
    status, _ = http(
        "POST", f"{gateway.url}/slack/events", raw=raw.encode(), headers=headers, timeout=30
    )
    return status, time.monotonic() - started


def _held(database_url: str) -> sqlite3.Connection:
    """Another process's write transaction on the gateway's database: its writes wait."""
    path = database_url.split("///", 1)[1]
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def _wait(condition: object, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_message_not_stored_by_the_deadline_is_refused_then_answered_once(
    gateway: GatewayProcess,
    database_url: str,
    model_server: FakeModelServer,
    platforms: tuple[FakeSlack, FakeTelegram],
) -> None:
    if not database_url.startswith("sqlite"):
        pytest.skip("holds SQLite's write lock from outside")
    slack, telegram = platforms
    gateway.start()
    # Warm: both platforms answered once (Slack's bot identity and Telegram's are known).
    assert _telegram(gateway, 1, "first on telegram")[0] == 200
    assert _slack(gateway, 1, "first on slack")[0] == 200
    _wait(lambda: len(telegram.delivered) == 1 and len(slack.messages) == 1, "warm replies")
    wait_all_settled(database_url)

    lock = _held(database_url)
    try:
        status, took = _slack(gateway, 2, "slow on slack")
        assert status == 500, "Slack must not hear 200 for a message that is not stored"
        assert took > 1.5  # it waited for the write until the deadline
        status, took = _telegram(gateway, 2, "slow on telegram")
        assert status == 503, "Telegram must not hear 200 for an update that is not stored"
        assert took > 5
        gateway.kill()  # before either write could run: neither is stored
    finally:
        lock.rollback()
        lock.close()

    gateway.start()
    # The platforms deliver again; this time both are stored.
    assert _slack(gateway, 2, "slow on slack", retry=1)[0] == 200
    assert _telegram(gateway, 2, "slow on telegram")[0] == 200
    _wait(lambda: len(telegram.delivered) == 2 and len(slack.messages) == 2, "the replies")
    wait_all_settled(database_url)
    time.sleep(0.5)  # anything answered twice would have been sent by now

    assert [m["text"] for m in telegram.delivered] == [
        "echo: first on telegram",
        "echo: slow on telegram",
    ]
    assert sorted(m["text"] for m in slack.messages) == [
        "echo: first on slack",
        "echo: slow on slack",
    ]
    assert len(model_server.requests) == 4
