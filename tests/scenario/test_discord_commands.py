"""Discord application commands end to end: the registry registered at start (and not again
when nothing changed), ``/jobs`` answered ephemerally with buttons that work, autocomplete
offering this conversation's schedules, malformed interactions shrugged off; and the
invite URL with no network. The real discord.py in a ``chatgate gateway`` process against
the fake Discord."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Connection

from adapters.discord.setup import command_drift, sync_commands
from agent_core.command_registry import COMMANDS
from agent_core.settings import Settings
from agent_core.storage.schema import schedules
from tests.fakes.database_reads import read_database
from tests.fakes.discord_server import APP_ID, CHANNEL, EPHEMERAL, GUILD, FakeDiscord
from tests.fakes.gateway import GatewayProcess, run_chatgate
from tests.fakes.model_server import FakeModelServer
from tests.scenario.test_tool_crashes import tool_call

pytestmark = [
    pytest.mark.any_database,
    # discord.py imports audioop, deprecated in Python 3.11 (drift is read in the test).
    pytest.mark.filterwarnings("ignore:'audioop' is deprecated:DeprecationWarning"),
]

ALICE = "301234567890123456"
DM_CHANNEL = "1299999999999999999"
COMMANDS_ROUTE = f"PUT applications/{APP_ID}/commands"


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    """The fake REST API and gateway."""
    with FakeDiscord() as server:
        yield server


def _gateway(
    database_url: str,
    model_server: FakeModelServer,
    discord: FakeDiscord,
    workdir: Path,
    **settings: str,
) -> GatewayProcess:
    workdir.mkdir(exist_ok=True)
    return GatewayProcess(
        database_url=database_url,
        workdir=workdir,
        CHATGATE_ACCESS="open",
        CHATGATE_STATE_DIR=str(workdir / "state"),
        **discord.settings(),
        **model_server.settings(),
        **settings,
    )


@pytest.fixture
def gateway(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> Iterator[GatewayProcess]:
    """A gateway connected to the fake Discord, open to everyone, its commands registered."""
    process = _gateway(database_url, model_server, discord, tmp_path / "gw")
    process.start()
    discord.wait_connected()
    discord.wait_for(COMMANDS_ROUTE, 1)
    yield process
    process.stop()


def _wait(found: Any, what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"no {what} in {timeout}s")


def _schedule(
    discord: FakeDiscord,
    model_server: FakeModelServer,
    prompt: str,
    *,
    channel: str = CHANNEL,
    guild: str | None = GUILD,
) -> None:
    """Someone asks for a schedule in ``channel``; the agent makes it and says so."""
    model_server.script(tool_call("schedule_task", {"prompt": prompt, "schedule": "every 1d"}),
                        f"Scheduled {prompt}.")  # fmt: skip
    before = len(discord.created)
    discord.message_create(f"every day: {prompt}", mention=True, channel=channel, guild=guild)
    _wait(lambda: len(discord.created) > before, "reply")


def _statuses(database_url: str) -> dict[str, str]:
    def read(conn: Connection) -> dict[str, str]:
        rows = conn.execute(select(schedules.c.prompt, schedules.c.status)).all()
        return {row.prompt: row.status for row in rows}

    return read_database(database_url, read)


def test_the_registry_is_registered_once_and_drift_is_reported(
    database_url: str, model_server: FakeModelServer, discord: FakeDiscord, tmp_path: Path
) -> None:
    """Start: every registry command with its options; a second start with nothing changed
    only reads them; a different set at Discord is reported as drift and synced back."""
    first = _gateway(database_url, model_server, discord, tmp_path / "a")
    first.start()
    try:
        [registered] = discord.wait_for(COMMANDS_ROUTE, 1)
    finally:
        first.stop()
    sent = {c["name"]: c for c in registered["body"]}
    assert set(sent) == {c.name for c in COMMANDS}
    cancel = sent["cancel"]["options"]
    assert cancel == [{"type": 3, "name": "id", "description": "the schedule (see /jobs)",
                       "required": True, "autocomplete": True}]  # fmt: skip
    busy = sent["busy"]["options"][0]
    assert busy["required"] is False
    assert "autocomplete" not in busy
    assert {c["value"] for c in busy["choices"]} >= {"queue", "steer"}
    assert sent["forget"]["contexts"] == [1]  # DMs only

    second = _gateway(database_url, model_server, discord, tmp_path / "b")
    second.start()
    try:
        discord.wait_connected(2)
        _wait(lambda: discord.called(f"GET applications/{APP_ID}/commands")[1:], "second read")
        time.sleep(0.5)
        assert len(discord.called(COMMANDS_ROUTE)) == 1
    finally:
        second.stop()

    settings = Settings(**discord.settings())  # type: ignore[arg-type]
    assert asyncio.run(command_drift(settings)) == []
    held = discord.app_commands[None]
    discord.app_commands[None] = [c for c in held if c["name"] != "jobs"] + [
        {**held[0], "name": "old"}
    ]
    next(c for c in discord.app_commands[None] if c["name"] == "cancel")["description"] = "x"
    assert asyncio.run(command_drift(settings)) == ["missing /jobs", "differs: /cancel",
                                                    "extra /old"]  # fmt: skip
    said = asyncio.run(sync_commands(settings))
    assert "registered (global)" in said
    assert "up to an hour" in said
    assert asyncio.run(command_drift(settings)) == []
    guilds = Settings(**discord.settings(), DISCORD_COMMAND_GUILDS=GUILD)  # type: ignore[arg-type]
    assert asyncio.run(command_drift(guilds))[0] == f"missing /help in guild {GUILD}"
    asyncio.run(sync_commands(guilds))
    assert {c["name"] for c in discord.app_commands[GUILD]} == {c.name for c in COMMANDS}


def test_jobs_is_answered_ephemerally_and_its_pause_button_works(
    gateway: GatewayProcess,
    model_server: FakeModelServer,
    discord: FakeDiscord,
    database_url: str,
) -> None:
    """``/jobs`` as an application command: deferred ephemeral at once, the listing comes
    as an ephemeral followup with the buttons; Pause there pauses the schedule once and
    redraws that message through the press."""
    _schedule(discord, model_server, "water the plants")
    created = len(discord.created)
    jobs = discord.command("jobs", user_id=ALICE)
    [deferred] = _wait(lambda: discord.callbacks(jobs), "defer")
    assert deferred["type"] == 5
    assert deferred["data"]["flags"] & EPHEMERAL
    [listing] = _wait(lambda: discord.followups(jobs), "jobs followup")
    assert listing["flags"] & EPHEMERAL
    assert "water the plants" in listing["content"]
    [row] = listing["components"]
    pause = next(b for b in row["components"] if b["label"].startswith("Pause"))
    message = next(m for m in discord.messages.values() if m["content"] == listing["content"])
    assert message["flags"] & EPHEMERAL
    assert len(discord.created) == created  # nothing in the channel

    pressed = discord.press(message, pause["custom_id"], presser=ALICE)
    [edit] = discord.wait_for(f"PATCH webhooks/{APP_ID}/itok-{pressed}/messages/@original", 1)
    assert "paused" in edit["content"]
    assert any(b["label"].startswith("Resume") for r in edit["components"] for b in r["components"])
    assert _statuses(database_url)["water the plants"] == "paused"
    time.sleep(1)
    assert [route for route, _ in discord.calls if str(pressed) in route] == [
        f"POST interactions/{pressed}/itok-{pressed}/callback",
        f"PATCH webhooks/{APP_ID}/itok-{pressed}/messages/@original",
    ]
    assert len(discord.created) == created


def test_autocomplete_offers_this_conversations_schedules_only(
    gateway: GatewayProcess, model_server: FakeModelServer, discord: FakeDiscord
) -> None:
    """``/cancel``'s id: the schedules of the conversation it is typed in, with what they
    do; not those of another conversation (a DM). Choosing one cancels it."""
    _schedule(discord, model_server, "feed the cat")
    _schedule(discord, model_server, "call mum", channel=DM_CHANNEL, guild=None)
    asked = discord.command("cancel", {"id": ""}, user_id=ALICE, focused="id")
    [answer] = _wait(lambda: discord.callbacks(asked), "autocomplete")
    assert answer["type"] == 8
    [choice] = answer["data"]["choices"]
    assert "feed the cat" in choice["name"]
    assert choice["value"].startswith("sc_")
    in_dm = discord.command("cancel", {"id": "sc"}, user_id=ALICE, focused="id",
                            channel=DM_CHANNEL, guild=None)  # fmt: skip
    [dm_answer] = _wait(lambda: discord.callbacks(in_dm), "autocomplete")
    [dm_choice] = dm_answer["data"]["choices"]
    assert "call mum" in dm_choice["name"]
    assert dm_choice["value"] != choice["value"]
    none = discord.command("cancel", {"id": "zzz-nothing"}, user_id=ALICE, focused="id")
    assert _wait(lambda: discord.callbacks(none), "autocomplete")[0]["data"]["choices"] == []

    cancel = discord.command("cancel", {"id": choice["value"]}, user_id=ALICE)
    [said] = _wait(lambda: discord.followups(cancel), "cancel answer")
    assert said["content"].startswith(f"Deleted schedule {choice['value']}")
    assert not said.get("flags", 0) & EPHEMERAL  # /cancel answers everyone


def test_malformed_interactions_are_dropped_and_the_session_goes_on(
    gateway: GatewayProcess, model_server: FakeModelServer, discord: FakeDiscord
) -> None:
    """Interactions discord.py cannot read, or that name no command of ours, change
    nothing: the session is not cut, and the next command is answered."""
    base = {"id": discord.next_id(), "application_id": APP_ID, "type": 2, "token": "itok-x",
            "version": 1, "channel_id": CHANNEL, "attachment_size_limit": 1,
            "guild_id": GUILD}  # fmt: skip
    member = {"user": {"id": ALICE, "username": "a", "discriminator": "0", "avatar": None},
              "roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": False,
              "mute": False, "flags": 0}  # fmt: skip
    for bad in (
        {"type": 2},
        {**base, "id": "not-a-number"},
        {**base, "id": discord.next_id(), "member": member, "data": {"name": "jobs",
         "options": "nope"}},
        {**base, "id": discord.next_id(), "member": member, "data": {"name": "cancel",
         "options": [{"name": "id", "value": {"x": 1}}]}},
        {**base, "id": discord.next_id(), "member": member, "data": {"name": "rm -rf"}},
        {**base, "id": discord.next_id(), "type": 4, "member": member, "data": {"name": "cancel",
         "options": [{"name": "id", "focused": True, "value": None}]}},
    ):  # fmt: skip
        discord.dispatch("INTERACTION_CREATE", bad)
    time.sleep(1)
    help_ = discord.command("help", user_id=ALICE)
    [said] = _wait(lambda: discord.followups(help_), "help")
    assert "Commands:" in said["content"]
    assert said["flags"] & EPHEMERAL
    assert len(discord.identified) == 1
    assert discord.resumed == 0
    assert "Traceback" not in gateway.log


def test_invite_url_needs_no_network(tmp_path: Path) -> None:
    """From the token alone (or ``--client-id``), under the network guard, and the fake
    Discord is asked nothing; a token not shaped like one exits 2 naming it."""
    with FakeDiscord() as discord:
        result = run_chatgate("discord", "invite-url", cwd=tmp_path, **discord.settings())
        assert result.returncode == 0, result.stderr
        query = parse_qs(urlparse(result.stdout.strip()).query)
        assert query["client_id"] == [APP_ID]
        assert query["scope"] == ["bot applications.commands"]
        other = run_chatgate("discord", "invite-url", "--client-id", "42", cwd=tmp_path,
                             DISCORD_BOT_TOKEN="garbage")  # fmt: skip
        assert parse_qs(urlparse(other.stdout.strip()).query)["client_id"] == ["42"]
        wrong = discord.settings() | {"DISCORD_BOT_TOKEN": "not-the-token"}
        result = run_chatgate("discord", "invite-url", cwd=tmp_path, **wrong)
        assert result.returncode == 2
        assert "DISCORD_BOT_TOKEN" in result.stderr
        assert discord.calls == []
