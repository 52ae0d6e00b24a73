"""A journaled turn as plain data: what its model saw (``Scenario``), the tool calls it made
with their recorded results (``RecordedCall``), and how it ended (``Original``).

An eval case written by hand is a ``Scenario`` with the tool results it serves; one taken
from a turn is the turn's, so both run through the same replay loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import JsonValue

from agent_core.model import ChatMessage


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedCall:
    """A tool call the recorded turn made, and the result its model read."""

    name: str
    arguments: JsonValue
    result: str
    # ok, error, denied, invalid_arguments, ... (``ToolOutcome.status``)
    status: str = "ok"
    # "approved by web:local", "denied by slack:U1": when a person was asked.
    approval: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        """For a report or a suite file."""
        found: dict[str, JsonValue] = {
            "name": self.name,
            "arguments": self.arguments,
            "result": self.result,
            "status": self.status,
        }
        if self.approval:
            found["approval"] = self.approval
        return found


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """What a turn's model saw before its first call: the running summary, the history
    before the turn, and the turn's own messages (its opening message, and those taken in)."""

    messages: tuple[str, ...]
    history: tuple[ChatMessage, ...] = ()
    summary: str | None = None

    def current(self) -> list[ChatMessage]:
        """The turn's messages, as its first model call sends them."""
        return [ChatMessage(role="user", content=text) for text in self.messages]


@dataclass(frozen=True, slots=True, kw_only=True)
class Original:
    """How the recorded turn went: its final answer, its tool calls, and what its model
    calls cost and took."""

    text: str = ""
    role: str = "assistant"
    model: str | None = None
    calls: tuple[RecordedCall, ...] = ()
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedTurn:
    """One journaled turn, ready to run again."""

    id: int
    conversation_id: str
    platform: str
    user: str
    created_at: datetime
    status: str
    scenario: Scenario
    original: Original
    # The ratings people gave its reply: "up" / "down".
    ratings: tuple[str, ...] = field(default=())


_SURROGATE = re.compile(r"[\ud800-\udfff]")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def well_formed(text: str) -> str:
    """``text`` with any lone surrogate (JSON's ``\\ud800`` decodes to one; UTF-8 cannot
    hold it) as U+FFFD, so it can be written to a file."""
    return _SURROGATE.sub("\ufffd", text)


def plain(text: str) -> str:
    """``text`` for one line of a terminal: control characters (C0, DEL, C1, newlines
    included) and lone surrogates as escapes, so words from a conversation cannot move the
    cursor, retitle the window or fake a line of the report."""
    return _UNSAFE.sub(lambda found: found.group().encode("unicode_escape").decode(), text)


def parse_arguments(text: str) -> JsonValue:
    """A tool call's arguments as the model wrote them, parsed (the text itself when it is
    not JSON)."""
    try:
        parsed: JsonValue = json.loads(text)
    except ValueError:
        return text
    return parsed


def canonical(value: Any) -> Any:
    """Arguments in a form where equivalent ones are equal: keys in order, ``2.0`` as ``2``,
    strings without surrounding blanks."""
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda i: str(i[0]))}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return value.strip()
    return value


def arguments_text(value: JsonValue) -> str:
    """Canonical arguments as compact JSON (what eval patterns are matched against)."""
    return json.dumps(canonical(value), ensure_ascii=False, separators=(",", ":"))


def history_of(lines: Sequence[Mapping[str, Any]]) -> tuple[ChatMessage, ...]:
    """History from ``{"role": ..., "text": ...}`` entries (a suite file's)."""
    return tuple(
        ChatMessage(
            role="assistant" if line.get("role") == "assistant" else "user",
            content=str(line.get("text", "")),
        )
        for line in lines
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """Which journaled turns to run again (every filter given must hold)."""

    turn_ids: tuple[int, ...] = ()
    conversation_id: str | None = None
    platform: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    # Only turns someone rated so: "up", "down", or "any" rating.
    feedback: str | None = None
    limit: int = 100
