"""The App Home tab kept current: published (``views.publish``) when a person opens it
(``app_home_opened``), and again after a press in it, or a press elsewhere by someone whose
Home this process has shown; and the configured suggested prompts offered when a person
opens the Messages tab (their DM with the app). Each publish is a task this object owns,
bounded, and drained when the adapter stops.

A press in the Home is handed to the gateway like any other (``EventSink``) and waited
for; its refusal, if any, is shown at the top of the redrawn Home. "Forget me" becomes
``forget me`` typed in the person's DM with the app, so the question (Erase / Keep) is
asked there by the usual flow and its answer edits it into the receipt.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog

from adapters.base import BadRequest, EventSink, NotStoredInTime
from adapters.slack.home import home_view
from adapters.slack.parse import home_dm, parse_action, parse_home_forget, user_id
from adapters.slack.send import SlackSender
from adapters.slack.session import suggest_prompts
from agent_core.errors import DeliveryError
from agent_core.events import ButtonPress, InboundMessage, Platform
from agent_core.home import PersonHome
from agent_core.section_settings import SuggestedPrompt

log = structlog.get_logger("chatgate.slack")

HomeSource = Callable[[Platform, str, str | None], Awaitable[PersonHome]]
# How many publishes run at once, and how many people's DMs are remembered (so a press in
# a channel redraws the presser's Home too).
_AT_ONCE = 8
_REMEMBERED = 10_000
# How long a press in the Home may take before the Home is redrawn regardless.
_PRESS_SECONDS = 30.0


class AppHome:
    """Publishes people's App Home tabs from the gateway's :data:`HomeSource`."""

    def __init__(
        self,
        sender: SlackSender,
        source: HomeSource,
        prompts: Sequence[SuggestedPrompt] = (),
    ) -> None:
        self._sender = sender
        self._source = source
        self._prompts = tuple(prompts)
        self._running: set[asyncio.Task[None]] = set()
        self._limit = asyncio.Semaphore(_AT_ONCE)
        # Whose Home this process has shown: their DM with the app, and team.
        self._shown: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()

    def opened(self, body: Mapping[str, Any]) -> None:
        """``app_home_opened``: on the Home tab, publish it; on the Messages tab (where the
        agent messaging experience starts a chat), offer the suggested prompts."""
        event = body.get("event")
        if not isinstance(event, Mapping) or event.get("tab") not in ("home", "messages"):
            return
        slack_user, channel = event.get("user"), event.get("channel")
        if not isinstance(slack_user, str) or not slack_user:
            raise BadRequest("app_home_opened needs 'user'")
        dm = channel if isinstance(channel, str) and channel.startswith("D") else None
        if event["tab"] == "messages":
            if dm is not None and self._prompts:
                self._spawn(suggest_prompts(self._sender, dm, self._prompts))
            return
        team = body.get("team_id") if isinstance(body.get("team_id"), str) else None
        self._spawn(self._publish(user_id(slack_user), team=team, dm=dm))

    def pressed(self, body: Mapping[str, Any], sink: EventSink) -> None:
        """A press in the Home: handled, then the Home redrawn."""
        forget = parse_home_forget(body)
        if forget is not None:
            self._spawn(self._forget(forget, sink))
            return
        press = parse_action(body)
        if press is None:
            return
        self._spawn(self._after(press, sink, dm=home_dm(body)))

    def knows(self, user: str) -> bool:
        """Has this process shown ``user`` their Home (so a press elsewhere redraws it)?"""
        return user in self._shown

    def press_elsewhere(
        self, press: ButtonPress, sink: EventSink, refuse: Callable[[str], Awaitable[None]]
    ) -> None:
        """A press on a message by someone whose Home this process showed: handled as
        usual (refusals in the channel), then their Home redrawn."""
        dm, _team = self._shown.get(press.user, (None, None))
        self._spawn(self._after(press, sink, dm=dm, refuse=refuse))

    async def drain(self) -> None:
        """Wait for the publishes under way."""
        if self._running:
            await asyncio.wait(set(self._running))

    def _spawn(self, work: Awaitable[None]) -> None:
        async def bounded() -> None:
            async with self._limit:
                await work

        task = asyncio.ensure_future(bounded())
        self._running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("publishing an App Home failed", exc_info=task.exception())

    async def _forget(self, asked: InboundMessage, sink: EventSink) -> None:
        with contextlib.suppress(NotStoredInTime):
            await sink(asked, deadline=_PRESS_SECONDS)

    async def _after(
        self,
        press: ButtonPress,
        sink: EventSink,
        *,
        dm: str | None,
        refuse: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        refused: list[str] = []

        async def told(text: str) -> None:
            refused.append(text)
            if refuse is not None:
                await refuse(text)

        await sink(press, deadline=_PRESS_SECONDS, refuse=told)
        notice = None if refuse is not None else (refused[-1] if refused else None)
        await self._publish(press.user, team=press.user_team, dm=dm, notice=notice)

    async def _publish(
        self, user: str, *, team: str | None, dm: str | None, notice: str | None = None
    ) -> None:
        """Gather the person's page and show it."""
        if dm is None:
            dm, _team = self._shown.get(user, (None, None))
        self._shown[user] = (dm, team)
        self._shown.move_to_end(user)
        while len(self._shown) > _REMEMBERED:
            self._shown.popitem(last=False)
        home = await self._source("slack", user, None if team in (None, "?") else team)
        try:
            await self._sender.publish_home(user, home_view(home, dm=dm, notice=notice))
        except DeliveryError as exc:
            log.warning("views.publish failed", user=user, error=str(exc))
