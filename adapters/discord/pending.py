"""Interactions this process may still answer: Discord lets an interaction's token be
used for 15 minutes. A command's answer (``Reply.answers``) goes to its interaction as a
followup; a listing's buttons pressed on an ephemeral message redraw it through the press
(channel endpoints cannot edit an ephemeral message). Another process, or an expired
token, finds nothing here and answers in the channel instead."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import discord

# An interaction token lasts 15 minutes; stop using it a little before.
TOKEN_SECONDS = 14 * 60.0
_KEPT = 4096


@dataclass(slots=True)
class Deferred:
    """A command's interaction, deferred: its answer comes as followups."""

    interaction: discord.Interaction[Any]
    ephemeral: bool
    at: float = field(default_factory=time.monotonic)
    answered: bool = False


class PendingInteractions:
    """By the command's event id (``int:{id}``), and by the ephemeral message a press
    was on."""

    def __init__(self, *, seconds: float = TOKEN_SECONDS) -> None:
        self._seconds = seconds
        self._commands: OrderedDict[str, Deferred] = OrderedDict()
        self._presses: OrderedDict[str, tuple[discord.Interaction[Any], float]] = OrderedDict()

    def deferred(
        self, event_id: str, interaction: discord.Interaction[Any], *, ephemeral: bool
    ) -> Deferred:
        """A command's interaction was deferred: keep it for its answer."""
        kept = Deferred(interaction, ephemeral)
        self._commands[event_id] = kept
        _trim(self._commands)
        return kept

    def command(self, event_id: str) -> Deferred | None:
        """The deferred interaction a reply answers, while its token lasts."""
        kept = self._commands.get(event_id)
        if kept is None or time.monotonic() - kept.at > self._seconds:
            self._commands.pop(event_id, None)
            return None
        return kept

    def pressed(self, message_id: str, interaction: discord.Interaction[Any]) -> None:
        """A button on an ephemeral message was pressed: its redraw goes through this
        press (the latest one)."""
        self._presses[message_id] = (interaction, time.monotonic())
        self._presses.move_to_end(message_id)
        _trim(self._presses)

    def press_on(self, message_id: str) -> discord.Interaction[Any] | None:
        """The latest press on that ephemeral message, while its token lasts."""
        kept = self._presses.get(message_id)
        if kept is None or time.monotonic() - kept[1] > self._seconds:
            self._presses.pop(message_id, None)
            return None
        return kept[0]


def _trim(kept: OrderedDict[str, Any]) -> None:
    while len(kept) > _KEPT:
        kept.popitem(last=False)
