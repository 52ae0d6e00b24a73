"""Scenario fixtures: the gateway app in-process, with the real litellm and the fake model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent_core.settings import Settings
from agent_core.settings_loader import load_settings
from gateway.app import build_app
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.http_echo import EchoServer
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


def settings_for(database_url: str, server: FakeModelServer | None, **extra: str) -> Settings:
    """Settings as a user would set them in the environment."""
    environ = {"CHATGATE_DATABASE_URL": database_url, "CHATGATE_LEASE_SECONDS": "2"}
    if server is not None:
        environ |= server.settings()
    return load_settings(environ | extra)


@pytest.fixture
async def make_client(
    database_url: str, model_server: FakeModelServer
) -> AsyncIterator[ClientFactory]:
    """Start the app (build_app, the real wiring) and return a client; closed at the end.

    It depends on ``model_server`` so the apps drain before the fake model stops: a turn
    still talking to it at teardown ends cleanly instead of on a closed socket."""
    clients: list[TestClient[Any, Any]] = []

    async def make(server: FakeModelServer | None = None, **extra: str) -> TestClient[Any, Any]:
        app = build_app(settings_for(database_url, server, **extra))
        client = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    """The API the http_request tool calls in these tests."""
    with EchoServer() as server:
        yield server


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    """The fake Slack Web API."""
    with FakeSlack() as server:
        yield server


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    """The fake Telegram Bot API."""
    with FakeTelegram() as server:
        yield server


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    """The fake Discord REST API and gateway."""
    with FakeDiscord() as server:
        yield server
