"""Setting Telegram up: ``chatgate telegram set-webhook`` / ``delete-webhook`` and what
``chatgate doctor`` says about the token and the webhook, against the fake Bot API."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.telegram_server import WEBHOOK_SECRET, FakeTelegram
from tests.scenario.test_cli import _chatgate

URL = "https://bot.example.com/telegram/webhook"


def test_set_webhook_registers_the_secret_and_the_updates_we_read(tmp_path: Path) -> None:
    with FakeTelegram() as telegram:
        result = _chatgate("telegram", "set-webhook", URL, cwd=tmp_path, **telegram.settings())
        assert result.returncode == 0, result.stderr
        assert URL in result.stdout
        [call] = telegram.called("setWebhook")
        assert call["url"] == URL
        assert call["secret_token"] == WEBHOOK_SECRET
        assert call["allowed_updates"] == [
            "message",
            "edited_message",
            "callback_query",
            "message_reaction",
        ]
        result = _chatgate("telegram", "delete-webhook", cwd=tmp_path, **telegram.settings())
        assert result.returncode == 0, result.stderr
        assert telegram.webhook["url"] == ""


def test_set_webhook_refuses_what_telegram_would_not_deliver_to(tmp_path: Path) -> None:
    with FakeTelegram() as telegram:
        polling = telegram.settings(webhook=False)
        result = _chatgate("telegram", "set-webhook", URL, cwd=tmp_path, **polling)
        assert result.returncode == 2
        assert "TELEGRAM_WEBHOOK_SECRET" in result.stderr
        plain = "http://bot.example.com/telegram/webhook"
        result = _chatgate("telegram", "set-webhook", plain, cwd=tmp_path, **telegram.settings())
        assert result.returncode == 2
        assert "https://" in result.stderr
        assert telegram.called("setWebhook") == []
        result = _chatgate("telegram", "delete-webhook", cwd=tmp_path)
        assert result.returncode == 2
        assert "TELEGRAM_BOT_TOKEN" in result.stderr


def test_doctor_compares_the_webhook_with_the_mode(tmp_path: Path) -> None:
    """Webhook mode without a registered webhook fails and says how to set it; once set it
    passes; polling with a webhook still registered warns; a wrong token fails."""
    with FakeTelegram() as telegram:
        result = _chatgate("doctor", cwd=tmp_path, **telegram.settings())
        assert "FAIL telegram   getMe ok as @chatgate_test_bot; webhook mode, but no webhook" in (
            result.stdout
        )
        assert "chatgate telegram set-webhook" in result.stdout
        assert result.returncode == 1
        _chatgate("telegram", "set-webhook", URL, cwd=tmp_path, **telegram.settings())
        result = _chatgate("doctor", cwd=tmp_path, **telegram.settings())
        assert f"ok   telegram   getMe ok as @chatgate_test_bot; webhook {URL}" in result.stdout
        result = _chatgate("doctor", cwd=tmp_path, **telegram.settings(webhook=False))
        assert "WARN telegram" in result.stdout
        assert "a webhook is registered" in result.stdout
        _chatgate("telegram", "delete-webhook", cwd=tmp_path, **telegram.settings())
        result = _chatgate("doctor", cwd=tmp_path, **telegram.settings(webhook=False))
        assert "ok   telegram   getMe ok as @chatgate_test_bot; long polling" in result.stdout
        wrong = telegram.settings() | {"TELEGRAM_BOT_TOKEN": "42:wrong"}
        result = _chatgate("doctor", cwd=tmp_path, **wrong)
        assert "FAIL telegram   getMe: Telegram does not know this token" in result.stdout
