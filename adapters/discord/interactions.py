"""Application commands and autocomplete over the gateway connection.

An application command is deferred at once (Discord gives 3 seconds; ephemeral when the
registry says its answer is the caller's alone), then handed to the sink as the message a
typed command would be; its answer comes back through the sender as a followup
(``adapters.discord.pending``). A command that answers nothing in words (``/new``, an
``/approve`` that edits its prompt) is told "Done." after a moment, so the caller is not
left looking at "thinking…". Autocomplete asks the gateway (``GatewayHooks.suggest``)
and answers within Discord's 3 seconds, with nothing when the gateway is slow.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog

from adapters.base import BadRequest, GatewayHooks
from adapters.discord.commands import choice_payloads, command_message, command_text, focused
from adapters.discord.parse import DM
from adapters.discord.pending import Deferred
from adapters.discord.send import DiscordSender
from agent_core.command_registry import BY_NAME
from agent_core.events import ConversationKey, InboundMessage
from agent_core.records import Accepted

if TYPE_CHECKING:
    import discord

log = structlog.get_logger("chatgate.discord")

_REMEMBERED = 4096
# How long autocomplete waits for the gateway's suggestions (Discord allows 3 s in all).
_SUGGEST_SECONDS = 2.0
DONE = "Done."
NOT_NOW = "That could not be done just now; try again in a moment."


def where(interaction: discord.Interaction[Any]) -> tuple[str | None, str, str | None]:
    """The interaction's guild, channel (or thread) and the thread's parent channel."""
    import discord

    channel = interaction.channel
    thread_parent = (
        str(channel.parent_id)
        if isinstance(channel, discord.Thread) and channel.parent_id
        else None
    )
    guild = str(interaction.guild_id) if interaction.guild_id else None
    return guild, str(interaction.channel_id), thread_parent


class CommandInteractions:
    """What the adapter does with application command and autocomplete interactions."""

    # Seconds after which a command nothing answered is told ``DONE``.
    settle_seconds = 8.0

    def __init__(self, sender: DiscordSender, hooks: GatewayHooks | None) -> None:
        self._sender = sender
        self._hooks = hooks
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._settling: set[asyncio.Task[None]] = set()

    def _first_time(self, interaction_id: int) -> bool:
        """False for an interaction seen already (a RESUME replays events)."""
        if interaction_id in self._seen:
            return False
        self._seen[interaction_id] = None
        while len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)
        return True

    async def command(
        self,
        interaction: discord.Interaction[Any],
        store: Callable[[InboundMessage], Awaitable[Accepted | None]],
    ) -> None:
        """Defer, then ``store`` the command as the message its text would be."""
        import discord

        if not self._first_time(interaction.id):
            return
        try:
            text = command_text(interaction.data or {})
        except BadRequest as exc:
            log.warning(
                "a malformed discord command", interaction_id=interaction.id, error=str(exc)
            )
            return
        if text is None or interaction.user is None or interaction.channel_id is None:
            return
        ephemeral = BY_NAME[text.split()[0][1:]].answer == "private"
        guild, channel, thread_parent = where(interaction)
        event = command_message(
            interaction_id=str(interaction.id),
            text=text,
            user=str(interaction.user.id),
            guild_id=guild,
            channel_id=channel,
            thread_parent=thread_parent,
        )
        deferred: Deferred | None = None
        try:
            await interaction.response.defer(ephemeral=ephemeral)
        except discord.HTTPException as exc:
            # Too late (Discord's 3 s) or gone: the command still counts, answered in
            # the channel.
            log.warning("could not defer a discord command", interaction_id=interaction.id,
                        error=str(exc))  # fmt: skip
        else:
            deferred = self._sender.interactions.deferred(
                event.platform_event_id, interaction, ephemeral=ephemeral
            )
        accepted = await store(event)
        if deferred is not None:
            task = asyncio.create_task(
                self._settle(deferred, DONE if accepted is not None else NOT_NOW),
                name=f"discord:settle:{interaction.id}",
            )
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)

    async def _settle(self, deferred: Deferred, text: str) -> None:
        """A while after the command was stored: if nothing answered it, say so."""
        import discord

        await asyncio.sleep(self.settle_seconds)
        if deferred.answered:
            return
        deferred.answered = True
        try:
            await deferred.interaction.followup.send(
                text, ephemeral=deferred.ephemeral, allowed_mentions=discord.AllowedMentions.none()
            )
        except discord.HTTPException as exc:
            log.info("a discord command's interaction expired", error=str(exc))

    async def autocomplete(self, interaction: discord.Interaction[Any]) -> None:
        """Suggest values for the option being typed: from the gateway, within 3 s."""
        import discord
        from discord import app_commands

        if not self._first_time(interaction.id):
            return
        suggestions: list[tuple[str, str]] = []
        try:
            wanted = focused(interaction.data or {})
        except BadRequest:
            wanted = None
        suggest = self._hooks.suggest if self._hooks is not None else None
        if wanted is not None and suggest is not None and interaction.user is not None:
            guild, channel, thread_parent = where(interaction)
            key = ConversationKey(
                platform="discord",
                workspace=guild or DM,
                channel=thread_parent or channel,
                thread=channel if thread_parent else None,
            )
            user = f"discord:{interaction.user.id}"
            try:
                async with asyncio.timeout(_SUGGEST_SECONDS):
                    suggestions = await suggest(wanted.suggest, key, user, wanted.typed)
            except Exception as exc:
                log.warning("no discord suggestions", kind=wanted.suggest, error=repr(exc))
        choices = [
            app_commands.Choice(name=c["name"], value=c["value"])
            for c in choice_payloads(suggestions)
        ]
        try:
            await interaction.response.autocomplete(choices)
        except discord.HTTPException as exc:
            log.info("could not answer a discord autocomplete", error=str(exc))

    def finish(self) -> None:
        """Stop waiting to say "Done."."""
        for task in list(self._settling):
            task.cancel()
