"""The chatgate command: exit codes, one-line configuration errors, migrate and doctor."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.gateway import ROOT, free_port, run_chatgate
from tests.fakes.model_server import FakeModelServer
from tests.fakes.slack_server import FakeSlack

MIGRATIONS = ROOT / "agent_core" / "storage" / "migrations" / "versions"


_chatgate = run_chatgate


def test_help_lists_the_commands(tmp_path: Path) -> None:
    """--help names run, gateway, migrate and doctor."""
    result = _chatgate("--help", cwd=tmp_path)
    assert result.returncode == 0
    for command in ("run", "gateway", "migrate", "doctor"):
        assert command in result.stdout


@pytest.mark.parametrize("command", ["run", "gateway", "migrate", "doctor"])
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("CHATGATE_PORT", "eighty"),
        ("CHATGATE_ACCESS", "everyone"),
        ("CHATGATE_DATABASE_URL", "mysql://db/x"),
        ("CHATGATE_WEB_TOKEN", "replace-me"),
        ("CHATGATE_WEB_TOKEN", "REPLACE_ME"),
        ("CHATGATE_WEB_TOKEN", "short-token"),
    ],
)
def test_bad_settings_exit_2_naming_the_key(
    tmp_path: Path, command: str, key: str, value: str
) -> None:
    """Every command refuses a bad value with exit code 2 and one line naming the key."""
    result = _chatgate(command, cwd=tmp_path, **{key: value})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"chatgate: invalid setting {key}: ")


def test_bad_toml_exits_2_naming_the_key(tmp_path: Path) -> None:
    """The same holds for a bad value in ./chatgate.toml."""
    (tmp_path / "chatgate.toml").write_text("max_concurrent_turns = -1\n")
    result = _chatgate("migrate", cwd=tmp_path)
    assert result.returncode == 2
    assert "max_concurrent_turns (in chatgate.toml)" in result.stderr


def test_migrate_creates_the_default_sqlite_database(tmp_path: Path) -> None:
    """With no settings, migrate creates ./.chatgate/chatgate.db at the newest revision."""
    result = _chatgate("migrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    head = sorted(p.name[:4] for p in MIGRATIONS.glob("0*.py"))[-1]
    assert f"database at revision {head}" in result.stdout
    assert (tmp_path / ".chatgate" / "chatgate.db").is_file()


def test_doctor_passes_with_a_working_database_and_model(
    tmp_path: Path, database_url: str, model_server: FakeModelServer
) -> None:
    """doctor checks the database and makes one model call; all ok exits 0."""
    result = _chatgate(
        "doctor",
        cwd=tmp_path,
        CHATGATE_DATABASE_URL=database_url,
        **model_server.settings(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok   model" in result.stdout
    assert len(model_server.requests) == 1


def test_doctor_reports_what_is_wrong_and_exits_1(tmp_path: Path) -> None:
    """An unreachable database and model fail with a fix each; exit code 1."""
    port = free_port()
    result = _chatgate(
        "doctor",
        cwd=tmp_path,
        CHATGATE_DATABASE_URL=f"postgresql+asyncpg://nobody@127.0.0.1:{port}/none",
        CHATGATE_MODEL="openai/fake-model",
        CHATGATE_MODEL_API_BASE=f"http://127.0.0.1:{port}/v1",
        CHATGATE_MODEL_API_KEY="sk-test",
        CHATGATE_MODEL_RETRIES="0",
        CHATGATE_MODEL_TIMEOUT="5",
        CHATGATE_REDIS_URL=f"redis://127.0.0.1:{port}/0",
        CHATGATE_FILES_S3_BUCKET="chatgate-files",
        CHATGATE_FILES_S3_ENDPOINT=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
    )
    assert result.returncode == 1, result.stdout + result.stderr
    for name in ("database", "redis", "model", "file store"):
        assert f"FAIL {name}" in result.stdout
    assert "fix: " in result.stdout


def test_doctor_without_a_model_warns_but_passes(tmp_path: Path) -> None:
    """No model is allowed (the gateway still runs); doctor says which setting to set."""
    result = _chatgate("doctor", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARN model" in result.stdout
    assert "CHATGATE_MODEL" in result.stdout


def test_doctor_reports_a_missing_secret(tmp_path: Path) -> None:
    """A [secrets] entry whose variable is unset fails with the fix."""
    (tmp_path / "chatgate.toml").write_text('[secrets]\nGITHUB = "CHATGATE_TEST_UNSET_VAR"\n')
    result = _chatgate("doctor", cwd=tmp_path)
    assert result.returncode == 1
    assert "FAIL secrets" in result.stdout
    assert "GITHUB (CHATGATE_TEST_UNSET_VAR)" in result.stdout
    assert "ok   tools" in result.stdout


async def test_pairing_commands_list_approve_and_revoke(tmp_path: Path, database_url: str) -> None:
    """An admin sees the pending code, approves it once, and can revoke the user."""
    from agent_core.storage.database import Database
    from agent_core.storage.store import Store
    from tests.fakes.records import pending_pairing

    database = Database(database_url)
    await database.migrate()
    await pending_pairing(Store(database), user="telegram:42", code="ABCD-EFGH")
    await database.dispose()
    env = {"CHATGATE_DATABASE_URL": database_url}
    listed = _chatgate("pairing", "list", cwd=tmp_path, **env)
    assert "ABCD-EFGH  telegram:42" in listed.stdout
    approved = _chatgate("pairing", "approve", "abcd-efgh", cwd=tmp_path, **env)
    assert approved.returncode == 0, approved.stderr
    assert "telegram:42 may now talk to the agent" in approved.stdout
    again = _chatgate("pairing", "approve", "ABCD-EFGH", cwd=tmp_path, **env)
    assert again.returncode == 1
    assert "already used" in again.stderr
    listed = _chatgate("pairing", "list", cwd=tmp_path, **env)
    assert "telegram:42  by cli:" in listed.stdout
    assert _chatgate("pairing", "revoke", "telegram:42", cwd=tmp_path, **env).returncode == 0
    assert _chatgate("pairing", "revoke", "telegram:42", cwd=tmp_path, **env).returncode == 1


def test_doctor_checks_the_slack_token_and_its_scopes(tmp_path: Path) -> None:
    """auth.test against the (fake) Slack API: ok; a missing scope is named; a bad token
    fails with the fix."""
    with FakeSlack() as slack:
        result = _chatgate("doctor", cwd=tmp_path, **slack.settings())
        assert "ok   slack      auth.test ok as UBOTCG01 in t; Events API" in result.stdout
        slack.scopes = "chat:write,app_mentions:read"
        result = _chatgate("doctor", cwd=tmp_path, **slack.settings())
        assert "WARN slack" in result.stdout
        assert "missing scopes: commands, im:history" in result.stdout
        result = _chatgate("doctor", cwd=tmp_path, **(slack.settings() | {"SLACK_BOT_TOKEN": "x"}))
        assert result.returncode == 1
        assert "FAIL slack      auth.test: invalid_auth" in result.stdout


def test_slack_manifest_prints_every_registry_command_with_the_url(tmp_path: Path) -> None:
    import yaml

    from agent_core.command_registry import COMMANDS

    printed = _chatgate("slack", "manifest", "--url", "https://chat.example/slack/events",
                        cwd=tmp_path)  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    manifest = yaml.safe_load(printed.stdout)
    commands = {c["command"]: c["url"] for c in manifest["features"]["slash_commands"]}
    assert {f"/{c.name}" for c in COMMANDS} | {"/chatgate"} == set(commands)
    assert set(commands.values()) == {"https://chat.example/slack/events"}
    refused = _chatgate("slack", "manifest", "--url", "http://chat.example/", cwd=tmp_path)
    assert refused.returncode == 2
