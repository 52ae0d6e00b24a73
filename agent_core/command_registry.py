"""The one registry of chat commands: each command's name, what it does, its arguments,
where it is offered and where it answers. Every platform's native command surface is
drawn from it (Discord application commands, Telegram's command menu, the Slack
manifest's slash commands), and so is ``/help``.

Pure data: the parsing of typed commands is ``agent_core.commands``; the answers are the
gateway's (``gateway.commands``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from agent_core.commands import CommandName

# Where a command is offered: private chats (DMs), group chats and channels, and to the
# group's administrators (Telegram's command menu scopes; the others offer everything
# everywhere and check who may do what when the command comes).
Scope: TypeAlias = Literal["private", "groups", "admins"]
# Where the answer goes: "private" only the caller sees it where the platform can do that
# (Slack's ephemeral messages, Discord's ephemeral interaction answers; elsewhere it is an
# ordinary answer), "here" everyone in the conversation.
Answer: TypeAlias = Literal["private", "here"]
# Where an argument's suggestions come from, as the person types (Discord autocomplete).
Suggest: TypeAlias = Literal["schedules", "approvals", "profiles", "models"]

EVERYWHERE: tuple[Scope, ...] = ("private", "groups", "admins")


@dataclass(frozen=True, slots=True, kw_only=True)
class Argument:
    """One argument of a command (the rest of the line, for the last one)."""

    name: str
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()
    suggest: Suggest | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """One command, as every platform offers it."""

    name: CommandName
    description: str
    arguments: tuple[Argument, ...] = ()
    scopes: tuple[Scope, ...] = EVERYWHERE
    answer: Answer = "here"
    # What ``/help`` shows after the name (``ID``, ``[MODE]``); derived when empty.
    usage: str = ""

    def synopsis(self) -> str:
        """``/name ARGS``, as ``/help`` lists it."""
        shown = self.usage or " ".join(
            a.name.upper() if a.required else f"[{a.name.upper()}]" for a in self.arguments
        )
        return f"/{self.name} {shown}".rstrip()


_BUSY = ("queue", "steer", "interrupt", "collect", "default")

COMMANDS: tuple[Command, ...] = (
    Command(name="help", description="What I can do here", answer="private"),
    Command(
        name="new",
        description="Start afresh: earlier messages stay but are no longer sent to the model",
    ),
    Command(
        name="jobs",
        description="This conversation's schedules, their latest runs, and buttons",
        answer="private",
    ),
    Command(
        name="cancel",
        description="Delete a schedule",
        arguments=(
            Argument(
                name="id",
                description="the schedule (see /jobs)",
                required=True,
                suggest="schedules",
            ),
        ),
    ),
    Command(
        name="bg",
        description="Work on something in the background and post the answer here",
        arguments=(Argument(name="prompt", description="what to do", required=True),),
    ),
    Command(name="schedule", description="How to schedule something", answer="private"),
    Command(
        name="stop",
        description="Stop what the agent is doing here (at its next step)",
    ),
    Command(
        name="busy",
        description="What a message sent while the agent works does here",
        arguments=(Argument(name="mode", description="how to treat it", choices=_BUSY),),
    ),
    Command(
        name="usage",
        description="Turns, model calls, tokens and cost here; your spend today",
        answer="private",
    ),
    Command(
        name="model",
        description="The model that answers here (admins: choose another)",
        arguments=(Argument(name="name", description="a configured model", suggest="models"),),
        answer="private",
    ),
    Command(
        name="profile",
        description="The profile that applies here (admins: choose another)",
        arguments=(
            Argument(name="name", description="a [[profile]] name, or default", suggest="profiles"),
        ),
        answer="private",
    ),
    Command(
        name="triggers",
        description="Triggers that post here and their latest fires (admins: pause, delete)",
        arguments=(
            Argument(
                name="action",
                description="what to do to one",
                choices=("pause", "resume", "delete"),
            ),
            Argument(name="id", description="the trigger (see /triggers)"),
        ),
        answer="private",
    ),
    Command(
        name="approve",
        description="Approve a pending tool call",
        arguments=(
            Argument(name="id", description="the approval", required=True, suggest="approvals"),
        ),
    ),
    Command(
        name="deny",
        description="Deny a pending tool call",
        arguments=(
            Argument(name="id", description="the approval", required=True, suggest="approvals"),
        ),
    ),
    Command(
        name="forget",
        description="Erase everything chatgate holds about you (asks first)",
        scopes=("private",),
        answer="private",
        usage="me",
    ),
)

BY_NAME: dict[str, Command] = {command.name: command for command in COMMANDS}


def offered(scope: Scope) -> list[Command]:
    """The commands a platform's menu offers in ``scope``."""
    return [command for command in COMMANDS if scope in command.scopes]


def help_text() -> str:
    """``/help``: every command with what it does."""
    lines = ["Commands:"]
    for command in COMMANDS:
        lines.append(f"{command.synopsis()}: {command.description}")
    lines.append('Ask in words to schedule something ("every weekday at 9, summarise ...").')
    return "\n".join(lines)
