"""Discord's inbound side: discord.py's gateway connection (DMs, guild messages, message
content, reactions), button presses through ``ui.DynamicItem`` so buttons sent before a
restart still work.

discord.py resumes the session after a disconnect (Discord replays what was missed; the
ingress ledger drops what is already stored); a new session reads what no session heard
(``adapters.discord.catch_up``). A message that cannot be stored (the database is down)
is tried again until it is: Discord would not send it again. ``DISCORD_API_URL`` and
``DISCORD_GATEWAY_URL`` are set on discord.py's class attributes (it has no options for
them).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from adapters.base import Check, EventSink, GatewayHooks, Hearing, Lock, SenderLifecycle
from adapters.discord.catch_up import MARK_EVERY, CatchUp, Mark
from adapters.discord.interactions import CommandInteractions
from adapters.discord.parse import (
    MessageFacts,
    attachment,
    button_press,
    deleted,
    inbound,
    reaction,
)
from adapters.discord.render import button_class
from adapters.discord.send import DiscordSender, point_at
from agent_core.events import InboundMessage, Platform, edited, utcnow
from agent_core.records import Accepted
from agent_core.settings import Settings

if TYPE_CHECKING:
    import discord

log = structlog.get_logger("chatgate.discord")

_TYPING_SECONDS = 8.0
_TYPING_LIMIT_SECONDS = 120.0
_REMEMBERED_PRESSES = 4096
# Storing a message: tries while the database answers before it is set aside.
_ATTEMPTS = 3
_RETRY_CAP_SECONDS = 30.0


def intents() -> discord.Intents:
    """What chatgate reads: guilds (channels and threads), guild and direct messages and
    their content (a privileged intent, switched on in the developer portal), and
    reactions in both (👍/👎 as feedback; not privileged)."""
    import discord

    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    wanted.guild_reactions = True
    wanted.dm_reactions = True
    return wanted


def facts_from_message(message: discord.Message) -> MessageFacts:
    """What a discord.py ``Message`` says (the same facts a recorded dispatch gives
    :func:`adapters.discord.parse.facts_from_dispatch`), for
    :func:`adapters.discord.parse.inbound`."""
    import discord

    channel = message.channel
    thread_parent = None
    bot_in_thread = False
    if isinstance(channel, discord.Thread):
        thread_parent = str(channel.parent_id)
        bot_in_thread = channel.me is not None
    replied = replied_text = replied_id = None
    reference = message.reference
    if reference is not None and isinstance(reference.resolved, discord.Message):
        replied = str(reference.resolved.author.id)
        replied_text = reference.resolved.content
        replied_id = str(reference.resolved.id)
    return MessageFacts(
        message_id=str(message.id),
        channel_id=str(message.channel.id),
        guild_id=str(message.guild.id) if message.guild is not None else None,
        author_id=str(message.author.id),
        author_is_bot=message.author.bot or message.author.system,
        webhook=message.webhook_id is not None,
        type=message.type.value,
        content=message.content,
        mentions=tuple(str(m.id) for m in message.mentions),
        replied_to_author=replied,
        replied_text=replied_text,
        replied_id=replied_id,
        thread_parent=thread_parent,
        bot_in_thread=bot_in_thread,
        attachments=tuple(
            attachment(
                {
                    "id": a.id,
                    "filename": a.filename,
                    "size": a.size,
                    "url": a.url,
                    "content_type": a.content_type,
                }
            )
            for a in message.attachments
        ),
    )


class DiscordAdapter(SenderLifecycle[DiscordSender]):
    """The gateway connection, held by one process at a time, and what it does with
    messages and presses."""

    platform: Platform = "discord"

    def __init__(self, settings: Settings, hooks: GatewayHooks | None = None) -> None:
        assert settings.discord_bot_token is not None
        self.sender = DiscordSender(
            settings.discord_bot_token.get_secret_value(), api_url=settings.discord_api_url
        )
        self.sender.on_sent = self.stop_typing
        self._settings = settings
        self._hooks = hooks
        self.client: Any = None
        self._lock: Lock | None = None
        self.hearing = Hearing()
        self._typing: dict[int, asyncio.Task[None]] = {}
        # Interactions handled lately: Discord replays events missed before a RESUME, and
        # an interaction may be answered only once.
        self._pressed: OrderedDict[int, None] = OrderedDict()
        self._mark = Mark()
        self._owed = False  # a new session's catch-up has not run yet
        self._catch_up = (
            CatchUp(hooks, horizon=settings.discord_catch_up_seconds) if hooks else None
        )
        self.commands = CommandInteractions(self.sender, hooks)
        self._synced = False  # the application commands, once per process

    def mount(self, router: web.UrlDispatcher, sink: EventSink) -> None:
        """No routes: everything comes over the gateway connection."""

    async def run(self, sink: EventSink, stopping: asyncio.Event) -> None:
        """Hold the gateway session while this process holds the lock (one process at a
        time; discord.py reconnects and resumes within a session)."""
        assert self._hooks is not None, "receiving needs the gateway's hooks"
        self._lock = self._hooks.lock("discord-gateway")
        await self._lock.serve(lambda: self._session(sink), stopping)

    def ready(self) -> str | None:
        """None once the gateway session is up here, or while another process holds it."""
        holding = self._lock is not None and self._lock.holding
        never = self.client is None or not self.client.is_ready()
        if holding and never and self.hearing.deaf_since is None:
            return "discord: gateway not connected yet"
        return None

    async def check(self) -> Check:
        """The token and the Message Content intent (``chatgate doctor``)."""
        from adapters.discord.setup import check

        return await check(self._settings)

    async def finish(self) -> None:
        """Stop every typing indicator, and waiting on commands."""
        for task in list(self._typing.values()):
            task.cancel()
        self.commands.finish()

    def _build(self, sink: EventSink) -> Any:
        import discord
        import discord.gateway
        import yarl

        point_at(self._settings.discord_api_url)
        gateway_url = yarl.URL(self._settings.discord_gateway_url)
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = gateway_url
        outer = self

        class Client(discord.Client):
            async def setup_hook(self) -> None:
                self.add_dynamic_items(button_class())
                _guard_interactions(self)

            async def on_connect(self) -> None:
                # READY: a new session, which hears from now on (not a RESUME).
                outer.new_session()

            async def on_ready(self) -> None:
                log.info("discord connected", bot=str(self.user), guilds=len(self.guilds))
                outer.hearing.connected_now()
                await outer.catch_up(sink)

            async def on_resumed(self) -> None:
                log.info("discord session resumed")
                outer.hearing.connected_now()
                await outer.resumed(sink)

            async def on_disconnect(self) -> None:
                # discord.py reconnects (and resumes) with backoff by itself.
                if outer.hearing.connected:
                    log.warning("discord gateway connection lost; reconnecting")
                outer.hearing.disconnected("discord: gateway disconnected (reconnecting)")

            async def on_message(self, message: discord.Message) -> None:
                outer.hearing.heard()
                await outer.on_message(message, sink)

            async def on_raw_message_edit(self, event: discord.RawMessageUpdateEvent) -> None:
                outer.hearing.heard()
                await outer.on_edit(event, sink)

            async def on_raw_message_delete(self, event: discord.RawMessageDeleteEvent) -> None:
                outer.hearing.heard()
                await outer.on_delete(event, sink)

            async def on_raw_reaction_add(self, event: discord.RawReactionActionEvent) -> None:
                outer.hearing.heard()
                await outer.on_reaction(event, sink, added=True)

            async def on_raw_reaction_remove(self, event: discord.RawReactionActionEvent) -> None:
                outer.hearing.heard()
                await outer.on_reaction(event, sink, added=False)

            async def chatgate_press(self, interaction: discord.Interaction, custom: str) -> None:
                await outer.on_press(interaction, custom, sink)

            async def on_interaction(self, interaction: discord.Interaction) -> None:
                await outer.on_interaction(interaction, sink)

        # No message cache: chatgate reads each message once, from its event.
        return Client(
            intents=intents(),
            allowed_mentions=discord.AllowedMentions.none(),
            max_messages=None,
        )

    def new_session(self) -> None:
        """A new gateway session: nothing before it is known to be heard until its
        catch-up is done."""
        self._owed = True
        self._mark.hold()
        if self._catch_up is not None:
            self._catch_up.connecting()

    async def resumed(self, sink: EventSink) -> None:
        """Discord replayed what the session missed; if the session's catch-up has not
        run yet (cut before it was ready), run it now."""
        if self._owed:
            await self.catch_up(sink)
            return
        if self._catch_up is not None:
            self._catch_up.not_needed()
        await self._write_mark()

    async def catch_up(self, sink: EventSink) -> None:
        """Once per new session: read what was written while no session heard
        (``adapters.discord.catch_up``), then let the mark move on."""
        if not self._owed:
            return
        self._owed = False
        try:
            if self._catch_up is not None:
                assert self.client is not None
                await self._catch_up.run(self.client, lambda message: self._receive(message, sink))
        finally:
            self._mark.release()
        await self._write_mark()

    async def on_message(self, message: discord.Message, sink: EventSink) -> None:
        """A live message: after its channel's catch-up, if one runs, store it if it is
        addressed to the bot (a RESUME's replay is a duplicate)."""
        if self._catch_up is not None:
            await self._catch_up.live(message.channel.id)
        await self._receive(message, sink)

    async def _receive(self, message: discord.Message, sink: EventSink) -> bool:
        """Store the message if it is addressed to the bot, then type until the reply
        goes out; True when it opened a turn."""
        assert self.client is not None
        assert self.client.user is not None
        event = inbound(facts_from_message(message), bot_id=str(self.client.user.id))
        if not isinstance(event, InboundMessage):
            return False
        self._mark.storing(message.id)
        accepted = await self._store(event, sink)
        self._mark.stored(message.id)
        if accepted is not None and accepted.turn_id and not accepted.duplicate:
            self._start_typing(message.channel)
            return True
        return False

    async def _store(self, event: InboundMessage, sink: EventSink) -> Accepted | None:
        """Hand the event to the sink until it is stored: Discord will not send it again.
        After ``_ATTEMPTS`` failures while the database answers it is set aside instead
        (None)."""
        assert self._hooks is not None
        attempts = 0
        while True:
            try:
                return await sink(event)
            except Exception as exc:
                attempts += 1
                log.error(
                    "storing a discord message failed",
                    event_id=event.platform_event_id,
                    attempts=attempts,
                    error=repr(exc),
                )
                if attempts >= _ATTEMPTS and await self._hooks.database_up():
                    raw = {"channel_id": event.raw.get("channel_id"), "text": event.text}
                    error = f"{type(exc).__name__}: {exc}"
                    if await self._hooks.set_aside("discord", event.platform_event_id, raw, error):
                        return None
                await asyncio.sleep(min(_RETRY_CAP_SECONDS, 0.5 * 2**attempts))

    async def _keep_mark(self) -> None:
        """While connected, keep until when everything heard is stored."""
        while True:
            await asyncio.sleep(MARK_EVERY)
            await self._write_mark()

    async def _write_mark(self) -> None:
        assert self._hooks is not None
        at = self._mark.until(utcnow())
        if at is None or not self.hearing.connected:
            return
        try:
            await self._hooks.hear_until("discord", at)
        except Exception as exc:
            log.warning("could not keep discord's hearing mark", error=repr(exc))

    async def on_edit(self, event: discord.RawMessageUpdateEvent, sink: EventSink) -> None:
        """A message edited (its new content; embeds filled in later are not an edit): if
        it was a person's message to the agent, the edit follows it."""
        assert self.client is not None
        assert self.client.user is not None
        if "content" not in event.data:
            return
        now = inbound(facts_from_message(event.message), bot_id=str(self.client.user.id))
        if now is None:
            return
        stamp = event.data.get("edited_timestamp") or hashlib.sha256(now.text.encode()).hexdigest()
        try:
            await sink(edited(now, event_id=f"{event.message_id}:{stamp}"))
        except Exception:
            log.exception("following a discord edit failed", message_id=event.message_id)

    async def on_delete(self, event: discord.RawMessageDeleteEvent, sink: EventSink) -> None:
        """A message deleted (raw: no message cache): if it was a person's message to the
        agent, it leaves the history."""
        gone = deleted(
            guild_id=str(event.guild_id) if event.guild_id else None,
            channel_id=str(event.channel_id),
            message_id=str(event.message_id),
        )
        try:
            await sink(gone)
        except Exception:
            log.exception("forgetting a deleted discord message failed", message_id=gone.message_id)

    async def on_reaction(
        self, event: discord.RawReactionActionEvent, sink: EventSink, *, added: bool
    ) -> None:
        """👍/👎 on a message (raw: chatgate keeps no message cache). Not caught up after a
        gap in the session, like presses: a lost one is a person reacting again."""
        assert self.client is not None
        assert self.client.user is not None
        if event.emoji.id is not None:
            return  # a server's own emoji
        author = event.message_author_id
        rated = reaction(
            user=str(event.user_id),
            bot_id=str(self.client.user.id),
            guild_id=str(event.guild_id) if event.guild_id else None,
            channel_id=str(event.channel_id),
            message_id=str(event.message_id),
            emoji=event.emoji.name or "",
            added=added,
            author_id=str(author) if author is not None else None,
        )
        if rated is not None:
            try:
                await sink(rated)
            except Exception:
                log.exception("keeping a discord reaction failed", message_id=event.message_id)

    async def on_press(
        self, interaction: discord.Interaction, custom: str, sink: EventSink
    ) -> None:
        """Acknowledge within Discord's 3 seconds (defer), then decide; a refusal is an
        ephemeral followup only the presser sees."""
        import discord

        if interaction.id in self._pressed:
            return  # replayed after a RESUME: answered already, and decided
        self._pressed[interaction.id] = None
        while len(self._pressed) > _REMEMBERED_PRESSES:
            self._pressed.popitem(last=False)
        await interaction.response.defer()
        if interaction.message is not None and interaction.message.flags.ephemeral:
            # Only this press can redraw the message it is on.
            self.sender.interactions.pressed(str(interaction.message.id), interaction)
        channel = interaction.channel
        thread_parent = (
            str(channel.parent_id)
            if isinstance(channel, discord.Thread) and channel.parent_id
            else None
        )
        press = button_press(
            interaction_id=str(interaction.id),
            custom_id=custom,
            user=str(interaction.user.id),
            guild_id=str(interaction.guild_id) if interaction.guild_id else None,
            channel_id=str(interaction.channel_id),
            thread_parent=thread_parent,
            message_id=str(interaction.message.id) if interaction.message else None,
        )
        if press is None:
            return

        async def refuse(text: str) -> None:
            await interaction.followup.send(
                text, ephemeral=True, allowed_mentions=discord.AllowedMentions.none()
            )

        await sink(press, refuse=refuse)

    async def on_interaction(self, interaction: discord.Interaction, sink: EventSink) -> None:
        """An application command (handed to the sink as the text it stands for) or an
        autocomplete; button presses come through their ``DynamicItem`` instead."""
        import discord

        if interaction.type is discord.InteractionType.application_command:
            self.hearing.heard()
            await self.commands.command(interaction, lambda event: self._store(event, sink))
        elif interaction.type is discord.InteractionType.autocomplete:
            await self.commands.autocomplete(interaction)

    async def _sync_commands(self, client: Any) -> None:
        """Once per process: register the application commands when Discord's differ from
        the registry (one GET; a PUT only then)."""
        from adapters.discord.setup import sync_with

        if self._synced:
            return
        try:
            async with asyncio.timeout(30):
                said = await sync_with(
                    client.http,
                    client.application_id,
                    guilds=self._settings.discord_command_guilds,
                )
        except Exception as exc:
            log.warning("could not register discord's application commands", error=repr(exc))
            return
        self._synced = True
        log.info("discord application commands", result=said)

    def _start_typing(self, channel: Any) -> None:
        if channel.id in self._typing:
            return

        async def keep_typing() -> None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_TYPING_LIMIT_SECONDS):
                    while True:
                        await channel.typing()
                        await asyncio.sleep(_TYPING_SECONDS)

        task = asyncio.create_task(keep_typing(), name=f"typing:{channel.id}")
        self._typing[channel.id] = task
        task.add_done_callback(lambda _: self._typing.pop(channel.id, None))

    def stop_typing(self, channel_id: int) -> None:
        """The reply went out: stop the indicator."""
        task = self._typing.get(channel_id)
        if task is not None:
            task.cancel()

    async def _session(self, sink: EventSink) -> None:
        import discord

        token = self._settings.discord_bot_token
        assert token is not None
        client = self._build(sink)
        self.client = client
        self.hearing.connected = False
        marking = asyncio.create_task(self._keep_mark(), name="discord:mark")
        syncing: asyncio.Task[None] | None = None
        try:
            await client.login(token.get_secret_value())
            self.sender.use(client)
            syncing = asyncio.create_task(self._sync_commands(client), name="discord:commands")
            await client.connect(reconnect=True)
        except discord.LoginFailure:
            log.error("discord rejected DISCORD_BOT_TOKEN; run chatgate doctor")
            await asyncio.Event().wait()  # keep the lock: another process would fail too
        except discord.PrivilegedIntentsRequired:
            log.error(
                "discord: the Message Content intent is off; switch it on in the developer "
                "portal (Bot, Privileged Gateway Intents)"
            )
            await asyncio.Event().wait()
        finally:
            marking.cancel()
            if syncing is not None:
                syncing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._write_mark()  # heard until now, if still connected
            self.hearing.released()
            for task in list(self._typing.values()):
                task.cancel()
            self.sender.forget(client)
            await client.close()


def _guard_interactions(client: Any) -> None:
    """An ``INTERACTION_CREATE`` discord.py cannot read (a field missing or of the wrong
    type) is logged and dropped: raised, it would end the gateway session."""
    parsers = client._connection.parsers
    original = parsers["INTERACTION_CREATE"]

    def guarded(data: Any) -> None:
        try:
            original(data)
        except Exception as exc:
            log.warning("a malformed discord interaction", error=repr(exc))

    parsers["INTERACTION_CREATE"] = guarded
