"""Settings: environment over chatgate.toml over defaults; bad values name their key."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.errors import ConfigError
from agent_core.settings_loader import load_settings


def test_defaults_match_the_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing set: loopback:8080, SQLite under .chatgate, pairing, no model."""
    monkeypatch.chdir(tmp_path)
    settings = load_settings({})
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.database_url == "sqlite+aiosqlite:///./.chatgate/chatgate.db"
    assert settings.access == "pairing"
    assert settings.model is None
    assert settings.redis_url is None


def test_environment_wins_over_toml(tmp_path: Path) -> None:
    """A key in both places takes the environment's value; lists split on commas."""
    config = tmp_path / "chatgate.toml"
    config.write_text('port = 9000\nmodel = "openai/a"\nadmins = ["web:local"]\n')
    settings = load_settings(
        {
            "CHATGATE_CONFIG": str(config),
            "CHATGATE_PORT": "9001",
            "CHATGATE_FALLBACK_MODELS": "openai/b, openai/c",
        }
    )
    assert settings.port == 9001
    assert settings.model == "openai/a"
    assert settings.admins == ["web:local"]
    assert settings.fallback_models == ["openai/b", "openai/c"]
    assert settings.config == config


def test_unprefixed_platform_keys_are_read() -> None:
    """SLACK_BOT_TOKEN and friends have no CHATGATE_ prefix."""
    settings = load_settings(
        {"SLACK_BOT_TOKEN": "xoxb-1", "TELEGRAM_API_URL": "http://127.0.0.1:1/bot"}
    )
    assert settings.slack_bot_token is not None
    assert settings.slack_bot_token.get_secret_value() == "xoxb-1"
    assert settings.telegram_api_url == "http://127.0.0.1:1/bot"


def test_postgres_urls_get_the_async_driver() -> None:
    """postgresql:// is accepted and mapped to asyncpg."""
    settings = load_settings({"CHATGATE_DATABASE_URL": "postgresql://u@h/db"})
    assert settings.database_url == "postgresql+asyncpg://u@h/db"


@pytest.mark.parametrize(
    ("environ", "key", "words"),
    [
        ({"CHATGATE_PORT": "eighty"}, "CHATGATE_PORT", "integer"),
        ({"CHATGATE_PORT": "70000"}, "CHATGATE_PORT", "65535"),
        ({"CHATGATE_ACCESS": "everyone"}, "CHATGATE_ACCESS", "pairing"),
        ({"CHATGATE_DATABASE_URL": "mysql://x/y"}, "CHATGATE_DATABASE_URL", "unsupported"),
        ({"CHATGATE_ADMINS": "U123"}, "CHATGATE_ADMINS", "platform:user_id"),
        ({"CHATGATE_REDIS_URL": "localhost:6379"}, "CHATGATE_REDIS_URL", "redis://"),
        ({"CHATGATE_MODEL_API_BASE": "localhost:9"}, "CHATGATE_MODEL_API_BASE", "http"),
        ({"DISCORD_GATEWAY_URL": "http://x"}, "DISCORD_GATEWAY_URL", "ws://"),
        ({"TELEGRAM_BOT_TOKEN": "not a token"}, "TELEGRAM_BOT_TOKEN", "BotFather"),
        ({"TELEGRAM_WEBHOOK_SECRET": "has spaces"}, "TELEGRAM_WEBHOOK_SECRET", "A-Z"),
        ({"TELEGRAM_API_URL": "api.telegram.org"}, "TELEGRAM_API_URL", "http"),
        ({"CHATGATE_MAX_CONCURRENT_TURNS": "0"}, "CHATGATE_MAX_CONCURRENT_TURNS", "1"),
        ({"CHATGATE_CONFIG": "/nonexistent/chatgate.toml"}, "CHATGATE_CONFIG", "TOML"),
        ({"CHATGATE_MEMORY_MAINTENANCE": "nightly"}, "CHATGATE_MEMORY_MAINTENANCE", "cron"),
        ({"CHATGATE_MEMORY_MAINTENANCE": "0 0 30 2 *"}, "CHATGATE_MEMORY_MAINTENANCE", "never"),
        ({"CHATGATE_MEMORY_MAINTENANCE": "every 2h"}, "CHATGATE_MEMORY_MAINTENANCE", "cron"),
        ({"CHATGATE_MEMORY_EXTRACT": "sometimes"}, "CHATGATE_MEMORY_EXTRACT", "boolean"),
    ],
)
def test_bad_values_name_the_key(environ: dict[str, str], key: str, words: str) -> None:
    """Each invalid value raises ConfigError naming the key and what it expects."""
    with pytest.raises(ConfigError) as caught:
        load_settings(environ)
    assert caught.value.key == key
    assert words in caught.value.reason


def test_bad_toml_value_names_the_file_key(tmp_path: Path) -> None:
    """A bad value in the file is reported as the TOML key in that file."""
    config = tmp_path / "chatgate.toml"
    config.write_text('port = "x"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings({"CHATGATE_CONFIG": str(config)})
    assert caught.value.key == f"port (in {config})"


def test_unknown_toml_key_is_an_error(tmp_path: Path) -> None:
    """A typo in chatgate.toml is reported, not ignored."""
    config = tmp_path / "chatgate.toml"
    config.write_text("prot = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"CHATGATE_CONFIG": str(config)})
    assert caught.value.key == "prot"
    assert "unknown setting" in caught.value.reason


def test_broken_toml_is_reported(tmp_path: Path) -> None:
    """A syntax error names CHATGATE_CONFIG and the line."""
    config = tmp_path / "chatgate.toml"
    config.write_text("port = \n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"CHATGATE_CONFIG": str(config)})
    assert caught.value.key == "CHATGATE_CONFIG"
    assert "line 1" in caught.value.reason


def test_secrets_are_not_echoed_in_errors() -> None:
    """A bad URL that may carry a password is not printed back."""
    with pytest.raises(ConfigError) as caught:
        load_settings({"CHATGATE_DATABASE_URL": "oracle://user:hunter2@db/x"})
    assert "hunter2" not in str(caught.value)


def test_policies_tools_and_secrets_load_from_toml(tmp_path: Path) -> None:
    """CONTRACT.md's sample sections are read and typed."""
    config = tmp_path / "chatgate.toml"
    config.write_text(
        """
[tools.http_request]
allowed_hosts = ["api.github.com", "127.0.0.1:9000"]

[tools.run_command]
timeout = 5
memory_mb = 256

[secrets]
GITHUB = "GITHUB_TOKEN"

[[policy]]
tool = "run_command"
args = { command = "ls( -[a-z]+)*" }
decision = "allow"
approvers = ["slack:U123"]
"""
    )
    settings = load_settings({"CHATGATE_CONFIG": str(config)})
    assert settings.tools.http_request.allowed_hosts == ["api.github.com", "127.0.0.1:9000"]
    assert (settings.tools.run_command.timeout, settings.tools.run_command.memory_mb) == (5, 256)
    assert settings.secrets["GITHUB"].env == "GITHUB_TOKEN"
    assert settings.secrets["GITHUB"].hosts is None
    assert settings.policy[0].decision == "allow"
    assert settings.policy[0].approvers == ["slack:U123"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[[policy]]\ntool = "x"\ndecision = "maybe"\n', "policy[0].decision"),
        ('[[policy]]\ntool = "x"\nargs = { a = "(" }\ndecision = "allow"\n', "policy[0].args"),
        ("[tools.run_command]\nmemory_mb = 1\n", "tools.run_command.memory_mb"),
        ("[tools.nope]\nx = 1\n", "tools.nope"),
        ('[[slack_suggested_prompts]]\ntitle = "x"\n', "slack_suggested_prompts[0].message"),
        (
            '[[slack_suggested_prompts]]\ntitle = "x"\nmessage = ""\n',
            "slack_suggested_prompts[0].message",
        ),
        (
            '[[slack_suggested_prompts]]\ntitle = "x"\nmessage = "y"\n' * 5,
            "slack_suggested_prompts",
        ),
    ],
)
def test_bad_sections_name_the_nested_key(tmp_path: Path, text: str, key: str) -> None:
    """A mistake inside a section names its path, e.g. policy[0].decision."""
    config = tmp_path / "chatgate.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings({"CHATGATE_CONFIG": str(config)})
    assert caught.value.key == f"{key} (in {config})"


def test_a_secret_may_be_bound_to_hosts_and_doctor_warns_about_unbound_ones(
    tmp_path: Path,
) -> None:
    """[secrets.NAME] env and hosts; the short form stays valid, and doctor names it."""
    from gateway.doctor import _secrets

    config = tmp_path / "chatgate.toml"
    config.write_text(
        '[secrets]\nOLD = "OLD_TOKEN"\n\n'
        '[secrets.GITHUB]\nenv = "GITHUB_TOKEN"\nhosts = ["api.github.com"]\n'
    )
    settings = load_settings({"CHATGATE_CONFIG": str(config)})
    assert settings.secrets["GITHUB"].hosts == ["api.github.com"]
    assert settings.secrets["OLD"].hosts is None
    check = _secrets(settings, {"OLD_TOKEN": "x", "GITHUB_TOKEN": "y"})
    assert check.status == "WARN"
    assert "OLD" in check.detail
    assert "GITHUB" not in check.detail
    config.write_text('[secrets.GITHUB]\nenv = "GITHUB_TOKEN"\nhosts = ["api.github.com"]\n')
    bound = load_settings({"CHATGATE_CONFIG": str(config)})
    assert _secrets(bound, {"GITHUB_TOKEN": "y"}).status == "ok"


def test_a_command_with_the_hosts_network_needs_the_web_token(tmp_path: Path) -> None:
    """network = "full" lets a command reach chatgate's own API on loopback, which without
    a token trusts loopback: refused, naming both settings; with the token, allowed."""
    from agent_core.errors import ConfigError

    config = tmp_path / "chatgate.toml"
    config.write_text('[tools.run_command]\nnetwork = "full"\n')
    with pytest.raises(ConfigError, match="CHATGATE_WEB_TOKEN"):
        load_settings({"CHATGATE_CONFIG": str(config)})
    allowed = load_settings(
        {"CHATGATE_CONFIG": str(config), "CHATGATE_WEB_TOKEN": "t" * 8 + "0123456789"}
    )
    assert allowed.tools.run_command.network == "full"
