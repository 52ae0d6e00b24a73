"""The Slack app's manifest, generated from the command registry (pure): one slash
command per registry command (``/jobs``, ``/cancel ID`` ...) and the umbrella
``/chatgate <command>``, the bot scopes doctor checks for, the bot events the adapter
listens to, and the App Home tab. ``deploy/slack/manifest.yml`` is this function's output
(a test keeps them equal); ``chatgate slack manifest --url URL`` prints it for a gateway.
"""

from __future__ import annotations

from typing import Any

import yaml

from adapters.slack.setup import SLACK_SCOPES
from agent_core.command_registry import COMMANDS, Command

PLACEHOLDER_URL = "https://chatgate.example.com/slack/events"
UMBRELLA = "chatgate"
"""``/chatgate <command>``: every command behind one slash command (the only one before
per-command slash commands, and still there for a workspace where another app took a name)."""

BOT_EVENTS = (
    "app_mention",
    "message.im",
    "message.channels",
    "message.groups",
    "reaction_added",
    "reaction_removed",
    "app_home_opened",
    "agent_session_stopped",
)

# Why each scope is asked for (the manifest's comment header says it).
_WHY = {
    "app_mentions:read": "@chatgate in channels",
    "chat:write": "replies, approval prompts, their updates, answers only the caller sees",
    "commands": "the slash commands",
    "im:history": "direct messages; finding a reply already posted (DMs)",
    "channels:history": "replies in threads the agent is in; finding a reply already posted",
    "groups:history": "the same in private channels",
    "files:read": "files people attach",
    "files:write": "files the agent sends (send_file)",
    "reactions:write": "what a turn that takes a while is doing, on its message",
    "reactions:read": "thumbs up/down on the agent's replies, kept as feedback",
    "assistant:write": "the agent session of a thread (status, title, Stop) and suggested prompts",
    "im:write": "approval prompts sent to approvers' DMs ([[policy]] route)",
}


def usage_hint(command: Command) -> str:
    """What Slack shows after the command's name as the person types (``ID``, ``[MODE]``;
    a short list of choices spelled out)."""
    if command.usage:
        return command.usage
    hints = []
    for argument in command.arguments:
        shown = "|".join(argument.choices) if argument.choices else argument.name.upper()
        hints.append(shown if argument.required else f"[{shown}]")
    return " ".join(hints)


def _slash(name: str, description: str, hint: str, url: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"command": f"/{name}"}
    if url is not None:
        entry["url"] = url
    entry["description"] = description
    if hint:
        entry["usage_hint"] = hint
    entry["should_escape"] = False
    return entry


def slash_commands(url: str | None) -> list[dict[str, Any]]:
    """Every registry command as a slash command, then ``/chatgate``."""
    entries = [_slash(c.name, c.description, usage_hint(c), url) for c in COMMANDS]
    names = " | ".join(c.synopsis().removeprefix("/") for c in COMMANDS[:6])
    entries.append(
        _slash(UMBRELLA, "chatgate's commands: help lists them all", f"{names} | ...", url)
    )
    return entries


def manifest(request_url: str | None = None, *, socket_mode: bool = False) -> dict[str, Any]:
    """The whole manifest. ``request_url`` is the gateway's ``/slack/events`` (a placeholder
    when None); with ``socket_mode`` Slack needs no URLs at all."""
    url = None if socket_mode else (request_url or PLACEHOLDER_URL)
    events: dict[str, Any] = {"bot_events": list(BOT_EVENTS)}
    interactivity: dict[str, Any] = {"is_enabled": True}
    if url is not None:
        events = {"request_url": url, **events}
        interactivity["request_url"] = url
    return {
        "display_information": {
            "name": "chatgate",
            "description": "One durable AI agent in your workspace",
            "background_color": "#1d232a",
        },
        "features": {
            "app_home": {
                "home_tab_enabled": True,
                "messages_tab_enabled": True,
                "messages_tab_read_only_enabled": False,
            },
            "bot_user": {"display_name": "chatgate", "always_online": True},
            # Declared an agent: its threads are agent sessions, with a status, a title and
            # Slack's own Stop button while it works.
            "agent_view": {"agent_description": "One durable AI agent in your workspace"},
            "slash_commands": slash_commands(url),
        },
        "oauth_config": {"scopes": {"bot": list(SLACK_SCOPES)}},
        "settings": {
            "event_subscriptions": events,
            "interactivity": interactivity,
            "org_deploy_enabled": False,
            "socket_mode_enabled": socket_mode,
            "token_rotation_enabled": False,
        },
    }


def manifest_text(request_url: str | None = None, *, socket_mode: bool = False) -> str:
    """The manifest as YAML, with a comment saying where to paste it and why each scope
    is there (``deploy/slack/manifest.yml`` is ``manifest_text()``)."""
    where = request_url or PLACEHOLDER_URL
    header = [
        "# Slack app manifest for chatgate, generated from its command registry",
        "# (chatgate slack manifest [--url URL]; do not edit by hand).",
        "# https://api.slack.com/apps -> Create New App -> From an app manifest (or your",
        "# app -> App Manifest) -> paste this, then reinstall the app.",
    ]
    if socket_mode:
        header.append("# Socket Mode: Slack connects to no URL (SLACK_APP_TOKEN is set).")
    elif request_url is None:
        header.append(f"# Replace {where} with your gateway's public URL.")
    header.append("# Bot scopes:")
    header += [f"#   {scope}: {_WHY.get(scope, '')}".rstrip(": ") for scope in SLACK_SCOPES]
    body: str = yaml.safe_dump(
        manifest(request_url, socket_mode=socket_mode),
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
    return "\n".join(header) + "\n" + body
