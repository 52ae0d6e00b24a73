"""Telegram's command menus from the command registry: set per scope when the gateway
starts (and only where they differ), by ``chatgate commands sync``, and reported by
``chatgate doctor`` when they drift. The real python-telegram-bot against the fake Bot API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.telegram.commands import menus
from agent_core.command_registry import COMMANDS
from tests.fakes.gateway import run_chatgate
from tests.fakes.model_server import FakeModelServer
from tests.fakes.telegram_server import FakeTelegram
from tests.scenario.test_telegram import _gateway

pytestmark = pytest.mark.any_database

SCOPES = ("all_private_chats", "all_group_chats", "all_chat_administrators")


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


def _menus(telegram: FakeTelegram) -> dict[str, list[tuple[str, str]]]:
    return {
        scope: [(c["command"], c["description"]) for c in commands]
        for scope, commands in telegram.command_menus.items()
    }


def test_the_gateway_sets_each_scopes_menu_once_and_sync_and_doctor_agree(
    database_url: str, model_server: FakeModelServer, telegram: FakeTelegram, tmp_path: Path
) -> None:
    process = _gateway(database_url, model_server, telegram, tmp_path, webhook=False)
    process.start()
    try:
        deadline = time.monotonic() + 20
        while len(telegram.called("setMyCommands")) < 3:
            assert time.monotonic() < deadline, telegram.calls
            time.sleep(0.05)
    finally:
        process.stop()
    assert _menus(telegram) == menus()
    assert set(telegram.command_menus) == set(SCOPES)
    private = [name for name, _ in menus()["all_private_chats"]]
    assert private == [c.name for c in COMMANDS]  # every command, in the registry's order
    groups = [name for name, _ in menus()["all_group_chats"]]
    assert "forget" not in groups  # erasing one's data is offered in private chats only
    assert dict(menus()["all_private_chats"])["cancel"] == "Delete a schedule (/cancel ID)"

    # Started again with the menus in place: read, not set again.
    process.start()
    try:
        deadline = time.monotonic() + 20
        while len(telegram.called("getMyCommands")) < 6:
            assert time.monotonic() < deadline, telegram.calls
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        process.stop()
    assert len(telegram.called("setMyCommands")) == 3

    settings = {"CHATGATE_DATABASE_URL": database_url, **telegram.settings(webhook=False)}
    doctor = run_chatgate("doctor", cwd=tmp_path, **settings)
    assert "ok   telegram commands" in doctor.stdout, doctor.stdout
    telegram.command_menus["all_group_chats"] = [{"command": "old", "description": "gone"}]
    doctor = run_chatgate("doctor", cwd=tmp_path, **settings)
    assert "the all group chats menu differs (only on one side:" in doctor.stdout, doctor.stdout
    assert "chatgate commands sync" in doctor.stdout
    synced = run_chatgate("commands", "sync", cwd=tmp_path, **settings)
    assert synced.returncode == 0, synced.stderr
    assert "telegram: command menus set for all private chats, all group chats" in synced.stdout
    assert _menus(telegram) == menus()
