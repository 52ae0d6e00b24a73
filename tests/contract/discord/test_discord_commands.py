"""The registry as Discord application commands, drift against what Discord answers, and
application-command and autocomplete interaction data back to commands (pure)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from adapters.base import BadRequest
from adapters.discord.commands import (
    application_id,
    choice_payloads,
    command_message,
    command_payloads,
    command_text,
    drift,
    focused,
)
from agent_core.command_registry import COMMANDS
from agent_core.commands import parse_command
from tests.fakes.discord_server import APP_ID, TOKEN


def _as_discord_keeps(payload: dict[str, Any]) -> dict[str, Any]:
    """A command as ``GET applications/{id}/commands`` answers: ids and defaults added,
    ``required: false`` left out."""
    options = [{k: v for k, v in o.items() if v is not False} for o in payload["options"]]
    return {**payload, "id": "9", "application_id": APP_ID, "version": "1", "nsfw": False,
            "default_member_permissions": None, "contexts": payload.get("contexts"),
            "integration_types": [0], "options": options}  # fmt: skip


def test_every_registry_command_is_a_chat_input_command_with_string_options() -> None:
    payloads = {p["name"]: p for p in command_payloads()}
    assert list(payloads) == [c.name for c in COMMANDS]
    for command in COMMANDS:
        payload = payloads[command.name]
        assert payload["type"] == 1
        assert 1 <= len(payload["description"]) <= 100
        assert [o["name"] for o in payload["options"]] == [a.name for a in command.arguments]
        for option, argument in zip(payload["options"], command.arguments, strict=True):
            assert option["type"] == 3
            assert option["required"] is argument.required
            assert option.get("autocomplete", False) is (argument.suggest is not None)
            assert [c["value"] for c in option.get("choices", [])] == list(argument.choices)
    assert payloads["approve"]["options"][0]["autocomplete"] is True


def test_drift_ignores_discords_own_fields_and_names_each_difference() -> None:
    wanted = command_payloads()
    held = [_as_discord_keeps(p) for p in wanted]
    assert drift(wanted, held) == []
    held[0] = {**held[0], "description": "changed"}
    held = [h for h in held if h["name"] != "usage"]
    held.append({**held[1], "name": "legacy"})
    held.append({"name": "Report", "type": 3})  # a message context-menu command: not ours
    assert drift(wanted, held) == ["differs: /help", "missing /usage", "extra /legacy"]


def test_an_application_command_is_the_text_a_person_would_type() -> None:
    assert command_text({"name": "jobs", "type": 1}) == "/jobs"
    cancel = {"name": "cancel", "options": [{"name": "id", "type": 3, "value": "sc_12ab"}]}
    assert command_text(cancel) == "/cancel sc_12ab"
    bg = {"name": "bg", "options": [{"name": "prompt", "value": "sum up\nthe  week"}]}
    assert command_text(bg) == "/bg sum up the week"
    forget = parse_command(command_text({"name": "forget"}) or "")
    assert forget is not None
    assert forget.name == "forget"
    assert command_text({"name": "nope"}) is None
    assert command_text({"name": "jobs", "type": 2}) is None  # a user context-menu command
    parsed = parse_command(command_text({"name": "approve", "options": [
        {"name": "id", "value": "ap_0123456789ab"}]}) or "")  # fmt: skip
    assert parsed is not None
    assert (parsed.name, parsed.args) == ("approve", "ap_0123456789ab")


@pytest.mark.parametrize(
    "data",
    [
        {"name": "jobs", "options": "all"},
        {"name": "jobs", "options": ["x"]},
        {"name": "cancel", "options": [{"name": "id", "value": {"nested": 1}}]},
        {"name": "cancel", "options": [{"name": "id", "value": True}]},
    ],
)
def test_malformed_command_data_is_a_bad_request(data: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        command_text(data)


def test_the_focused_option_says_what_to_suggest() -> None:
    typing = {"name": "cancel", "options": [{"name": "id", "value": " sc_1", "focused": True}]}
    found = focused(typing)
    assert found is not None
    assert (found.command, found.option, found.typed, found.suggest) == (
        "cancel", "id", "sc_1", "schedules")  # fmt: skip
    assert focused({"name": "busy", "options": [{"name": "mode", "focused": True}]}) is None
    assert focused({"name": "cancel", "options": [{"name": "id", "value": "x"}]}) is None
    with pytest.raises(BadRequest):
        focused({"name": "cancel", "options": 7})


def test_choices_are_at_most_25_and_fit_discords_limits() -> None:
    many = [(f"sc_{i}", f"sc_{i}: every day: " + "x" * 200) for i in range(40)]
    choices = choice_payloads([("", "empty"), ("v" * 101, "too long"), *many])
    assert len(choices) == 25
    assert choices[0]["value"] == "sc_0"
    assert all(len(c["name"]) <= 100 for c in choices)


def test_a_command_belongs_where_a_message_there_would() -> None:
    guild = command_message(interaction_id="5", text="/jobs", user="7", guild_id="1",
                            channel_id="2", thread_parent=None)  # fmt: skip
    assert (guild.workspace, guild.channel, guild.thread) == ("1", "2", None)
    assert guild.platform_event_id == "int:5"
    assert guild.user == "discord:7"
    thread = command_message(interaction_id="5", text="/jobs", user="7", guild_id="1",
                             channel_id="3", thread_parent="2")  # fmt: skip
    assert (thread.channel, thread.thread) == ("2", "3")
    dm = command_message(interaction_id="5", text="/jobs", user="7", guild_id=None,
                         channel_id="4", thread_parent=None)  # fmt: skip
    assert (dm.workspace, dm.channel) == ("@me", "4")


def test_the_application_id_comes_from_the_token() -> None:
    assert application_id(TOKEN) == int(APP_ID)
    real_shape = base64.b64encode(b"123456789012345678").decode().rstrip("=") + ".Gx1.abc"
    assert application_id(real_shape) == 123456789012345678
    for bad in ("not-the-token", "a.b", "", "bm90LWRpZ2l0cw.x.y", "..", "MTIz.x.y"):
        assert application_id(bad) is None
