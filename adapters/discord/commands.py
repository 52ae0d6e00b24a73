"""The command registry as Discord application commands, and application-command and
autocomplete interactions back to what a typed command would be (pure).

- Registering: one ``CHAT_INPUT`` command per registry command, each argument a string
  option (``required``; ``choices`` when it has fixed ones; ``autocomplete`` when its
  suggestions come from chatgate). What Discord holds is compared field by field on what
  chatgate sets (:func:`drift`), so a start with nothing changed sends nothing.
- An application command (interaction type 2) is the text ``/name value ...``, as if it
  had been typed, in the conversation a message there would be in (:func:`command_message`).
- Autocomplete (type 4): the focused option's name and what is typed so far
  (:func:`focused`); the answer is at most 25 choices (:func:`choice_payloads`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.base import BadRequest
from adapters.discord.parse import DM, user_id
from agent_core.command_registry import BY_NAME, COMMANDS, Command, Suggest
from agent_core.events import InboundMessage

CHAT_INPUT = 1
STRING = 3
APPLICATION_COMMAND = 2
AUTOCOMPLETE = 4
# Discord's limits: a description, a choice's name and value at most 100 characters, at
# most 25 choices.
_TEXT = 100
MAX_CHOICES = 25
# An interaction context: a guild channel, a DM with the bot, a group DM.
_CONTEXTS = {"groups": (0,), "private": (1,), "admins": (0,)}


def command_payload(command: Command) -> dict[str, Any]:
    """One registry command as Discord's application command JSON."""
    options: list[dict[str, Any]] = []
    # Discord wants required options first; the registry lists them so already.
    for argument in sorted(command.arguments, key=lambda a: not a.required):
        option: dict[str, Any] = {
            "type": STRING,
            "name": argument.name,
            "description": argument.description[:_TEXT],
            "required": argument.required,
        }
        if argument.choices:
            option["choices"] = [{"name": c, "value": c} for c in argument.choices]
        elif argument.suggest is not None:
            option["autocomplete"] = True
        options.append(option)
    payload: dict[str, Any] = {
        "type": CHAT_INPUT,
        "name": command.name,
        "description": command.description[:_TEXT],
        "options": options,
    }
    contexts = sorted({c for scope in command.scopes for c in _CONTEXTS[scope]})
    if contexts != [0, 1]:
        payload["contexts"] = contexts
    return payload


def command_payloads(commands: Iterable[Command] = COMMANDS) -> list[dict[str, Any]]:
    """The body of the bulk overwrite: every registry command."""
    return [command_payload(command) for command in commands]


def _option_shape(option: Mapping[str, Any]) -> tuple[Any, ...]:
    choices = tuple(
        (str(c.get("name")), str(c.get("value")))
        for c in option.get("choices") or ()
        if isinstance(c, Mapping)
    )
    return (
        option.get("type"),
        option.get("name"),
        option.get("description"),
        bool(option.get("required", False)),
        choices,
        bool(option.get("autocomplete", False)),
    )


def _shape(command: Mapping[str, Any]) -> tuple[Any, ...]:
    """What chatgate sets of a command, with Discord's defaults filled in (Discord
    answers with more fields, and leaves some out when they hold their default)."""
    options = command.get("options") or ()
    contexts = command.get("contexts")
    return (
        command.get("type", CHAT_INPUT),
        command.get("description"),
        tuple(_option_shape(o) for o in options if isinstance(o, Mapping)),
        _contexts(contexts),
    )


def _contexts(contexts: object) -> tuple[int, ...]:
    """Where a command is offered; () for everywhere (Discord says so with null, or
    with every context listed)."""
    if not isinstance(contexts, list):
        return ()
    found = tuple(sorted({c for c in contexts if isinstance(c, int)}))
    return () if found in ((0, 1), (0, 1, 2)) else found


def drift(wanted: Sequence[Mapping[str, Any]], held: Sequence[Any]) -> list[str]:
    """What differs between the commands chatgate registers and those Discord holds, one
    line each (``missing /jobs``, ``differs: /cancel``, ``extra /old``); empty when they
    are the same."""
    have = {str(c.get("name")): c for c in held if isinstance(c, Mapping) and c.get("type", 1) == 1}
    lines: list[str] = []
    for command in wanted:
        name = str(command["name"])
        found = have.pop(name, None)
        if found is None:
            lines.append(f"missing /{name}")
        elif _shape(found) != _shape(command):
            lines.append(f"differs: /{name}")
    lines.extend(f"extra /{name}" for name in sorted(have))
    return lines


def application_id(token: str) -> int | None:
    """The application id a bot token carries: its first dot-separated part is the
    base64 of the bot's user id, which is its application's id. None when the token is
    not shaped like one."""
    parts = token.strip().split(".")
    if len(parts) != 3 or not all(parts):
        return None
    first = parts[0]
    try:
        decoded = base64.urlsafe_b64decode(first + "=" * (-len(first) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not decoded.isdigit() or not 15 <= len(decoded) <= 21:
        return None
    return int(decoded)


def _options(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    options = data.get("options") or []
    if not isinstance(options, list) or not all(isinstance(o, Mapping) for o in options):
        raise BadRequest("an application command's 'options' must be a list of objects")
    return options


def command_text(data: Mapping[str, Any]) -> str | None:
    """An application command interaction's ``data`` as the text a person would type
    (``/cancel s_1``), or None when it is not one of ours."""
    if not isinstance(data, Mapping):
        raise BadRequest("an application command needs 'data'")
    command = BY_NAME.get(str(data.get("name")))
    if command is None or data.get("type", CHAT_INPUT) != CHAT_INPUT:
        return None
    given = {str(o.get("name")): o.get("value") for o in _options(data)}
    if not command.arguments and command.usage.islower():
        return f"/{command.name} {command.usage}"  # a fixed word: ``forget me``
    values = []
    for argument in command.arguments:
        value = given.get(argument.name)
        if value is None:
            continue
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise BadRequest(f"option {argument.name!r} is not a string")
        values.append(" ".join(str(value).split()))
    return " ".join([f"/{command.name}", *(v for v in values if v)])


@dataclass(frozen=True, slots=True)
class Focused:
    """The option a person is typing into, in an autocomplete interaction."""

    command: str
    option: str
    typed: str
    suggest: Suggest


def focused(data: Mapping[str, Any]) -> Focused | None:
    """The focused option of an autocomplete interaction's ``data``, when chatgate
    suggests values for it (None otherwise)."""
    if not isinstance(data, Mapping):
        raise BadRequest("an autocomplete interaction needs 'data'")
    command = BY_NAME.get(str(data.get("name")))
    if command is None:
        return None
    for option in _options(data):
        if not option.get("focused"):
            continue
        name = str(option.get("name"))
        for argument in command.arguments:
            if argument.name == name and argument.suggest is not None:
                value = option.get("value")
                typed = value if isinstance(value, str) else ""
                return Focused(command.name, name, typed.strip(), argument.suggest)
    return None


def choice_payloads(suggestions: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """At most 25 ``{name, value}`` choices (the label shown, the value sent), each cut
    to Discord's 100 characters; values that would not fit are left out."""
    choices: list[dict[str, str]] = []
    for value, label in suggestions:
        if not value or len(value) > _TEXT:
            continue
        shown = label or value
        shown = shown if len(shown) <= _TEXT else shown[: _TEXT - 1] + "…"
        choices.append({"name": shown, "value": value})
        if len(choices) == MAX_CHOICES:
            break
    return choices


def command_message(
    *,
    interaction_id: str,
    text: str,
    user: str,
    guild_id: str | None,
    channel_id: str,
    thread_parent: str | None,
) -> InboundMessage:
    """An application command as the message a typed command would be, in the
    conversation a message in that channel (or thread, or DM) is in. Nothing to reply
    to: the answer goes to the interaction."""
    if guild_id is None:
        workspace, channel, thread = DM, channel_id, None
    elif thread_parent is not None:
        workspace, channel, thread = guild_id, thread_parent, channel_id
    else:
        workspace, channel, thread = guild_id, channel_id, None
    return InboundMessage(
        platform="discord",
        workspace=workspace,
        channel=channel,
        thread=thread,
        user=user_id(user),
        text=text,
        platform_event_id=interaction_event_id(interaction_id),
        raw={"channel_id": channel_id, "interaction": True},
    )


INTERACTION_PREFIX = "int:"


def interaction_event_id(interaction_id: str | int) -> str:
    """An interaction's id in the ingress ledger (a press's is the same)."""
    return f"{INTERACTION_PREFIX}{interaction_id}"
