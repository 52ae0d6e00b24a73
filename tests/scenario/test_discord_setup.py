"""Setting Discord up: ``chatgate discord invite-url`` and what ``chatgate doctor`` says
about the token, the Message Content intent and an interactions URL, against the fake."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

from tests.fakes.discord_server import APP_ID, FakeDiscord
from tests.scenario.test_cli import _chatgate


def test_invite_url_names_the_application_the_permissions_and_commands(tmp_path: Path) -> None:
    with FakeDiscord() as discord:
        result = _chatgate("discord", "invite-url", cwd=tmp_path, **discord.settings())
        assert result.returncode == 0, result.stderr
        url = urlparse(result.stdout.strip())
        query = parse_qs(url.query)
        assert query["client_id"] == [APP_ID]
        assert query["scope"] == ["bot applications.commands"]
        permissions = int(query["permissions"][0])
        for bit in (10, 11, 14, 15, 16, 38):  # view, send, embed, attach, history, threads
            assert permissions & (1 << bit)
        wrong = discord.settings() | {"DISCORD_BOT_TOKEN": "not-the-token"}
        result = _chatgate("discord", "invite-url", cwd=tmp_path, **wrong)
        assert result.returncode == 2
        assert "DISCORD_BOT_TOKEN" in result.stderr


def test_doctor_checks_the_token_and_the_message_content_intent(tmp_path: Path) -> None:
    with FakeDiscord() as discord:
        result = _chatgate("doctor", cwd=tmp_path, **discord.settings())
        assert "ok   discord    logged in as chatgate#4242; Message Content intent on" in (
            result.stdout
        )
        discord.application_flags = 0
        result = _chatgate("doctor", cwd=tmp_path, **discord.settings())
        assert "FAIL discord    logged in as chatgate#4242, but the Message Content intent" in (
            result.stdout
        )
        assert "Message Content Intent" in result.stdout
        assert result.returncode == 1
        wrong = discord.settings() | {"DISCORD_BOT_TOKEN": "not-the-token"}
        result = _chatgate("doctor", cwd=tmp_path, **wrong)
        assert "FAIL discord    login: Discord does not know this token" in result.stdout
