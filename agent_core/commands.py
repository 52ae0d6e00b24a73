"""Text commands typed in a chat (``/approve ID``, ``deny ID`` ...): parsing only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

CommandName: TypeAlias = Literal[
    "help",
    "new",
    "jobs",
    "cancel",
    "bg",
    "approve",
    "deny",
    "usage",
    "schedule",
    "stop",
    "busy",
    "forget",
    "model",
    "profile",
    "triggers",
]

_COMMAND = re.compile(r"^/?(?P<name>[a-z]+)(?:\s+(?P<args>.*))?$", re.DOTALL)
_NAMES = frozenset(get_args(CommandName))


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A command name from CONTRACT.md and the rest of the line."""

    name: CommandName
    args: str


def parse_command(text: str) -> ParsedCommand | None:
    """The command in ``text``, or None when it is an ordinary message.

    ``/approve ID`` and ``approve ID`` both count for approve and deny (they need an id),
    and ``forget me`` with or without the slash; other names only with the leading slash,
    so "help me with..." stays a message.
    """
    if re.fullmatch(r"/?forget\s+me[.!]?", text.strip(), re.IGNORECASE):
        return ParsedCommand(name="forget", args="me")
    match = _COMMAND.match(text.strip())
    if match is None or match.group("name") not in _NAMES:
        return None
    name = match.group("name")
    args = (match.group("args") or "").strip()
    slashed = text.strip().startswith("/")
    if name == "forget":
        return None  # only ``forget me`` (above): a person's data, never anyone else's
    if name in ("approve", "deny"):
        if not re.fullmatch(r"ap_[0-9a-f]{6,30}", args):
            return None
    elif not slashed:
        return None
    return ParsedCommand(name=name, args=args)  # type: ignore[arg-type]
