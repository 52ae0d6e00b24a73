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
            "CHATGATE_DATABASE_URL": "postgresql+asyncpg://chat:hunter2/hunter2?x#y@db:5432/chat",
            "CHATGATE_MODEL_API_BASE": "http://apiuser:Pw0rd/xyz@127.0.0.1:9/v1",
            "SLACK_API_URL": "https://bot:slackpass77@slack.example/api/",
            "CHATGATE_REDIS_URL": "redis://:red@spass99@cache:6379/0?password=again99",
            "CHATGATE_MODEL_API_KEY": "sk-model-key-7777777777",
            "CHATGATE_WEB_TOKEN": "a-web-token-with-enough-length",
            "CHATGATE_MODEL": "openai/gpt-4o-mini",
            "CHATGATE_PROFILE": json.dumps(
                [{"name": "local", "model": "openai/m", "api_base": "http://u:profpass5@h:1/v1"}]
            ),
        }
    )
    shown = settings_view(settings)
    dumped = json.dumps(shown)
    for secret in (
        token,
        "hunter2",
        "spass99",
        "again99",
        "sk-model-key",
        "a-web-token",
        "Pw0rd",
        "slackpass77",
        "profpass5",
    ):
        assert secret not in dumped
    assert shown["slack_bot_token"] == "set"
    assert shown["database_url"] == "postgresql+asyncpg://***@db:5432/chat"
    assert shown["model_api_base"] == "http://***@127.0.0.1:9/v1"
    assert shown["redis_url"] == "redis://***@cache:6379/0"
    assert shown["model"] == "openai/gpt-4o-mini"
    assert shown["telegram_bot_token"] is None
    assert shown["slack_api_url"] == "https://***@slack.example/api/"
    assert shown["profile"] == [
        {"name": "local", "model": "openai/m", "api_base": "http://***@h:1/v1"}
    ]
