"""What the audit log shows of the settings a process started with: no secret, in any form."""

from __future__ import annotations

import json

from agent_core.settings_loader import load_settings
from gateway.upkeep import settings_view


def test_secrets_show_as_set_and_urls_lose_their_credentials() -> None:
    token = "xoxb-0123456789-abcdefghijklmnop"
    settings = load_settings(
        {
            "SLACK_BOT_TOKEN": token,
            "SLACK_SIGNING_SECRET": "s" * 32,
            "CHATGATE_DATABASE_URL": "postgresql+asyncpg://chat:hunter2hunter2@db:5432/chat",
            "CHATGATE_REDIS_URL": "redis://:redispass99@cache:6379/0?password=again99",
            "CHATGATE_MODEL_API_KEY": "sk-model-key-7777777777",
            "CHATGATE_WEB_TOKEN": "a-web-token-with-enough-length",
            "CHATGATE_MODEL": "openai/gpt-4o-mini",
        }
    )
    shown = settings_view(settings)
    dumped = json.dumps(shown)
    for secret in (
        token,
        "hunter2hunter2",
        "redispass99",
        "again99",
        "sk-model-key",
        "a-web-token",
    ):
        assert secret not in dumped
    assert shown["slack_bot_token"] == "set"
    assert shown["database_url"] == "postgresql+asyncpg://***@db:5432/chat"
    assert shown["redis_url"] == "redis://***@cache:6379/0"
    assert shown["model"] == "openai/gpt-4o-mini"
    assert shown["telegram_bot_token"] is None
