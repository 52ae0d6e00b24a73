"""The Slack manifest drawn from the command registry, slash commands as text commands,
presses on ephemeral messages and in the App Home, and the Home view itself (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.base import BadRequest
from adapters.slack.home import home_view
from adapters.slack.manifest import BOT_EVENTS, manifest_text
from adapters.slack.parse import (
    EPHEMERAL,
    check_request,
    home_dm,
    is_home,
    parse_action,
    parse_command,
    parse_home_forget,
)
from adapters.slack.setup import SLACK_SCOPES, command_drift, sync_commands
from agent_core.command_registry import COMMANDS
from agent_core.commands import parse_command as parse_text_command
from agent_core.events import ConversationKey, event_from_json, event_to_json
from agent_core.home import PersonHome
from agent_core.records import ApprovalRecord, ScheduleRecord
from agent_core.settings import Settings
from agent_core.stores.home import OwnSchedule, PersonUsage

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((HERE / f"{name}.json").read_text())
    return loaded


def test_the_manifest_parses_and_holds_every_registry_command_and_the_home_tab() -> None:
    loaded = yaml.safe_load(manifest_text("https://gw.example.org/slack/events"))
    commands = {c["command"]: c for c in loaded["features"]["slash_commands"]}
    assert set(commands) == {f"/{c.name}" for c in COMMANDS} | {"/chatgate"}
    assert commands["/cancel"]["usage_hint"] == "ID"
    assert commands["/bg"]["usage_hint"] == "PROMPT"
    assert all(c["should_escape"] is False for c in commands.values())
    assert {c["url"] for c in commands.values()} == {"https://gw.example.org/slack/events"}
    assert all(len(c["command"]) <= 32 and c["description"] for c in commands.values())
    assert loaded["oauth_config"]["scopes"]["bot"] == list(SLACK_SCOPES)
    assert loaded["settings"]["event_subscriptions"]["bot_events"] == list(BOT_EVENTS)
    assert "app_home_opened" in BOT_EVENTS
    assert loaded["features"]["app_home"]["home_tab_enabled"] is True
    assert (
        loaded["settings"]["interactivity"]["request_url"] == "https://gw.example.org/slack/events"
    )


def test_deploy_manifest_is_the_generators_output() -> None:
    """deploy/slack/manifest.yml never drifts from the registry."""
    assert (ROOT / "deploy/slack/manifest.yml").read_text() == manifest_text()


def test_a_socket_mode_manifest_names_no_url() -> None:
    text = manifest_text(socket_mode=True)
    loaded = yaml.safe_load(text)
    assert "url" not in loaded["features"]["slash_commands"][0]
    assert loaded["settings"]["socket_mode_enabled"] is True
    assert "request_url" not in loaded["settings"]["event_subscriptions"]
    assert "example.com" not in text


async def test_sync_says_what_to_paste_and_drift_claims_nothing() -> None:
    settings = Settings(_env_file=None, slack_bot_token="xoxb-1", slack_signing_secret="s")  # type: ignore[call-arg]
    line = await sync_commands(settings)
    assert "chatgate slack manifest --url" in line
    assert "App Manifest" in line
    assert await command_drift(settings) == []


def _form(command: str, text: str) -> dict[str, str]:
    form = _load("slash_command")
    form.update(command=command, text=text)
    return form


@pytest.mark.parametrize(
    ("command", "text", "typed"),
    [
        ("/jobs", "", "/jobs"),
        ("/cancel", " sc_1a2b3c4d ", "/cancel sc_1a2b3c4d"),
        ("/bg", "summarise the incidents", "/bg summarise the incidents"),
        ("/chatgate", "usage", "/usage"),
        ("/chatgate", "", "/help"),
        ("/forget", "", "/forget me"),
        ("/approve", "ap_0123456789ab", "/approve ap_0123456789ab"),
    ],
)
def test_each_slash_command_is_the_text_command_it_names(
    command: str, text: str, typed: str
) -> None:
    event = parse_command(_form(command, text))
    assert event.text == typed
    assert parse_text_command(event.text) is not None
    assert event.user == "slack:U061F7AUR"
    assert event.platform_event_id.startswith("cmd:")
    assert event_from_json(event_to_json(event)) == event


def test_a_slash_command_the_registry_does_not_know_is_help_and_marked() -> None:
    event = parse_command(_form("/frobnicate", "now"))
    assert event.text == "/help"
    assert event.raw["unknown"] is True


def _ephemeral_press(action_id: str, value: str) -> dict[str, Any]:
    payload = _load("block_actions")
    payload["container"] = {
        "type": "message",
        "message_ts": "1515449530.000100",
        "channel_id": "C0LAN2Q65",
        "is_ephemeral": True,
    }
    del payload["message"]
    payload["actions"][0].update(action_id=action_id, value=value, block_id=f"job:{value}")
    return payload


def test_a_press_on_an_ephemeral_message_names_it_by_its_response_url() -> None:
    press = parse_action(_ephemeral_press("chatgate_job_pause", "sc_1a2b3c4d"))
    assert press is not None
    assert press.message is not None
    assert press.message.message_id == f"{EPHEMERAL}{_load('block_actions')['response_url']}"
    assert press.action == "pause"
    assert press.value == "sc_1a2b3c4d"
    assert "https" not in press.platform_event_id


def _home_press(action_id: str, block_id: str, value: str) -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": "U061F7AUR", "username": "alice", "team_id": "T061EG9R6"},
        "api_app_id": "A0MDYCDME",
        "container": {"type": "view", "view_id": "V0HOME"},
        "trigger_id": "1.2.3",
        "team": {"id": "T061EG9R6", "domain": "riverteam"},
        "view": {"id": "V0HOME", "type": "home", "private_metadata": '{"dm": "D0ALICE"}'},
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "value": value,
                "type": "button",
                "action_ts": "1515449540.123456",
            }
        ],
    }


def test_an_approve_in_the_app_home_is_a_press_without_a_message() -> None:
    body = _home_press("chatgate_approve", "home_approval:ap_0123456789ab", "ap_0123456789ab")
    assert is_home(body)
    assert home_dm(body) == "D0ALICE"
    press = parse_action(body)
    assert press is not None
    assert (press.approval_id, press.action, press.message) == ("ap_0123456789ab", "approve", None)
    assert press.raw["home"] is True


def test_a_schedule_button_in_the_app_home_names_the_schedules_conversation() -> None:
    block = "home_job:sc_1a2b3c4d:T061EG9R6:C0LAN2Q65:1515449522.000016"
    press = parse_action(_home_press("chatgate_job_resume", block, "sc_1a2b3c4d"))
    assert press is not None
    assert press.conversation == ConversationKey(
        platform="slack", workspace="T061EG9R6", channel="C0LAN2Q65", thread="1515449522.000016"
    )
    assert (press.action, press.value) == ("resume", "sc_1a2b3c4d")


def test_forget_me_in_the_app_home_is_forget_me_typed_in_the_dm() -> None:
    event = parse_home_forget(_home_press("chatgate_home_forget", "forget", "D0ALICE"))
    assert event is not None
    assert (event.channel, event.thread, event.text) == ("D0ALICE", None, "forget me")
    assert parse_text_command(event.text) is not None


@pytest.mark.parametrize(
    "broken",
    [
        {"type": "block_actions", "actions": "x", "user": {"id": "U1"}},
        {"type": "block_actions", "actions": [{"action_id": "chatgate_approve"}], "user": 5},
        {**_home_press("chatgate_home_forget", "forget", "not-a-dm")},
        {
            **_home_press("chatgate_approve", "home_approval:ap_1", "ap_1"),
            "team": None,
            "user": {"id": "U1"},
        },
        {**_ephemeral_press("chatgate_job_pause", "sc_1"), "message": "not an object"},
        {
            "type": "block_actions",
            "actions": [{"action_id": "chatgate_deny"}],
            "user": {"id": "U1"},
            "team": 7,
            "channel": {},
        },
        {"type": "event_callback", "event": {"type": "app_home_opened", "user": ["U1"]}},
        7,
    ],
)
def test_malformed_presses_and_home_events_are_bad_requests(broken: Any) -> None:
    with pytest.raises(BadRequest):
        check_request(broken)


def test_a_slash_command_without_its_fields_is_a_bad_request() -> None:
    with pytest.raises(BadRequest):
        check_request(None, form={"command": "/jobs", "team_id": "T1"})


def _home(approvals: int, schedules: int) -> PersonHome:
    now = datetime(2025, 5, 14, 9, 30, tzinfo=UTC)
    where = ConversationKey(platform="slack", workspace="T1", channel="C1", thread="1.2")
    return PersonHome(
        user="slack:U1",
        approvals=tuple(
            ApprovalRecord(
                id=f"ap_{i:012x}",
                turn_id=i,
                seq=1,
                conversation_id="c",
                conversation=where,
                kind="tool",
                tool="http_request",
                arguments={"method": "POST", "url": "http://x/" + "y" * 3000},
                requested_by="slack:U1",
                approvers=(),
                status="pending",
                decided_by=None,
                expires_at=now,
            )
            for i in range(approvals)
        ),
        schedules=tuple(
            OwnSchedule(
                schedule=ScheduleRecord(
                    id=f"sc_{i:08x}",
                    conversation_id="c",
                    created_by="slack:U1",
                    prompt="report",
                    kind="cron",
                    spec="0 9 * * 1-5",
                    timezone="UTC",
                    anchor=None,
                    missed="skip",
                    status="active" if i % 2 else "paused",
                    next_run_at=now,
                    failures=0,
                    created_at=now,
                ),
                conversation=where,
            )
            for i in range(schedules)
        ),
        usage=PersonUsage(since=now.replace(day=1, hour=0, minute=0), turns=3, cost_usd=0.25),
    )


def test_a_full_home_fits_slacks_limits_and_keeps_the_dm() -> None:
    """Ten approvals (long arguments) and twenty schedules stay within 100 blocks, every
    section within 3,000 characters, block ids unique."""
    view = home_view(_home(10, 20), dm="D0ALICE", notice="ap_x was already decided.")
    blocks = view["blocks"]
    assert view["type"] == "home"
    assert json.loads(view["private_metadata"]) == {"dm": "D0ALICE"}
    assert len(blocks) <= 100
    ids = [b["block_id"] for b in blocks if "block_id" in b]
    assert len(ids) == len(set(ids))
    assert all(len(i) <= 255 for i in ids)
    assert all(len(b["text"]["text"]) <= 3000 for b in blocks if b["type"] == "section")
    text = json.dumps(blocks)
    assert "since 1 May" in text
    assert "$0.2500" in text
    assert "already decided" in text
    assert text.count('"chatgate_approve"') == 10
    assert text.count('"chatgate_job_resume"') == 10
    assert text.count('"chatgate_job_pause"') == 10
    assert '"chatgate_home_forget"' in text


def test_an_empty_home_says_so_and_without_a_dm_offers_no_forget() -> None:
    view = home_view(_home(0, 0), dm=None)
    text = json.dumps(view["blocks"])
    assert "Nothing is waiting for you" in text
    assert "chatgate_home_forget" not in text
