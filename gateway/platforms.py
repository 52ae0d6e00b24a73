"""Any chat adapter, connected to the gateway: its routes mounted, its connection run while
the gateway serves, its readiness in ``/readyz``, and every message and button press it
receives handed to inbound routing through one :class:`Sink`.

The gateway knows platforms only through ``adapters.base``; nothing here imports an SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from datetime import datetime
from typing import Any

import structlog
from aiohttp import web

from adapters.base import ChatAdapter, GatewayHooks, Hearing, NotStoredInTime, Refuse
from adapters.http import json_error
from adapters.registry import UNCONFIGURED_ROUTES
from agent_core import forget_me, questions
from agent_core.command_registry import Suggest
from agent_core.errors import ApprovalError, NotAllowedToDecide, ScheduleActionError
from agent_core.events import (
    ButtonAction,
    ButtonPress,
    ConversationKey,
    Edit,
    InboundMessage,
    MessageDeleted,
    MessageEdited,
    Platform,
    Reaction,
    utcnow,
)
from agent_core.faults import FaultPoints
from agent_core.home import PersonHome, person_home
from agent_core.records import Accepted, ApprovalDecision
from agent_core.scheduling.service import ScheduleAction
from gateway.console_people import forget_person
from gateway.inbound import refusal
from gateway.routes import PLATFORM_HEARING, add_platform_check
from gateway.runtime import RUNTIME, Runtime
from gateway.singleton import Holder
from gateway.suggestions import Suggestions

log = structlog.get_logger("chatgate.platforms")

# What each button does, by the kind of thing it is on.
_DECISIONS: dict[ButtonAction, ApprovalDecision] = {
    "approve": "approve",
    "allow_conversation": "allow_conversation",
    "deny": "deny",
}
_SCHEDULE_ACTIONS: dict[ButtonAction, ScheduleAction] = {
    "pause": "pause",
    "resume": "resume",
    "delete": "delete",
}


class Sink:
    """The gateway's :class:`adapters.base.EventSink`: messages into the ingress ledger
    (answering by the platform's deadline, the rest in the background), presses decided,
    reactions kept as ratings."""

    def __init__(self, app: web.Application, adapters: Mapping[Platform, ChatAdapter]) -> None:
        self._app = app
        self._adapters = adapters
        self._background: set[asyncio.Future[Any]] = set()

    async def __call__(
        self,
        event: InboundMessage | ButtonPress | Reaction | MessageDeleted | MessageEdited,
        *,
        deadline: float | None = None,
        refuse: Refuse | None = None,
    ) -> Accepted | None:
        runtime = self._app[RUNTIME]
        if isinstance(event, MessageDeleted):
            # Not ledgered: forgetting twice finds nothing the second time.
            deleted = runtime.inbound.message_deleted(event)
            await asyncio.wait({self.run(deleted)}, timeout=deadline)
            return None
        if isinstance(event, MessageEdited):
            # Its text is set, not added to (an edit during a turn is ledgered as a message).
            edited = runtime.inbound.message_edited(event)
            await asyncio.wait({self.run(edited)}, timeout=deadline)
            return None
        if isinstance(event, ButtonPress):
            await asyncio.wait({self.run(self._press(runtime, event, refuse))}, timeout=deadline)
            return None
        if isinstance(event, Reaction):
            # A rating is an upsert: a platform's retry finds it made, a lost one is a
            # person reacting again. So it is not ledgered, and answered by the deadline.
            await asyncio.wait({self.run(runtime.feedback.react(event))}, timeout=deadline)
            return None
        if event.raw.get("ambient") is True:
            # A message to nobody in particular (a group's, a channel's): only where the
            # profile says the agent answers every message.
            if not await self._answers_all(runtime, event):
                return None
        elif (
            event.raw.get("addressed") is False
            and await runtime.store.conversation_id_for(event.conversation) is None
        ):
            return None  # a reply in a thread: only where the agent already talks
        return await self._accept(runtime, event, deadline)

    async def _answers_all(self, runtime: Runtime, event: InboundMessage) -> bool:
        """Whether the profile of the message's conversation answers every message (no
        database read unless some profile does)."""
        profiles = runtime.profiles
        if not profiles.any_answers_all:
            return False
        pinned = None
        conversation_id = await runtime.store.conversation_id_for(event.conversation)
        if conversation_id is not None:
            pinned, _model = await runtime.store.pins(conversation_id)
        return profiles.applied(event.conversation, pinned_profile=pinned).reply == "all"

    async def _accept(
        self, runtime: Runtime, event: InboundMessage, deadline: float | None
    ) -> Accepted:
        """Return once the event is stored (with what the ledger said); raise when storing
        it failed (the database is down) or was not done by the deadline
        (``NotStoredInTime``: storing goes on), so the platform delivers it again later.
        A command's answer, which may wait on a 429, finishes in the background."""
        stored: asyncio.Future[Accepted] = asyncio.get_running_loop().create_future()

        def done(accepted: Accepted) -> None:
            if not stored.done():
                stored.set_result(accepted)

        work = self.run(runtime.inbound.accept(event, stored=done))
        try:
            await asyncio.wait(
                {work, stored}, timeout=deadline, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if not stored.done():
                stored.cancel()
        if work.done():
            result: Accepted = work.result()
            return result
        if stored.done() and not stored.cancelled():
            return stored.result()
        log.warning(
            "inbound not stored by the platform's deadline; it will deliver it again",
            platform=event.platform,
            event_id=event.platform_event_id,
            deadline_seconds=deadline,
        )
        raise NotStoredInTime(event.platform_event_id)

    async def _named(self, runtime: Runtime, press: ButtonPress) -> bool:
        """A press from afar (Slack's App Home): only the approval's own deciders."""
        assert press.approval_id is not None
        approval = await runtime.store.approval(press.approval_id)
        return approval is None or runtime.inbound.approvals.named(approval, press.user)

    async def _press(self, runtime: Runtime, press: ButtonPress, refuse: Refuse | None) -> None:
        """Decide an approval, or change a schedule and redraw its listing in place; a
        person who may not do that is told through ``refuse`` (shown to them alone)."""

        async def tell(text: str) -> None:
            if refuse is not None:
                await refuse(text)

        if press.action == "stop":
            refused = await runtime.inbound.stop_pressed(press)
            if refused is not None:
                await tell(refused)
            return
        if press.action == "forget":
            await self._forget(runtime, press, tell)
            return
        if press.approval_id and press.action in ("answer", "other"):
            choice = questions.OTHER if press.action == "other" else press.value or ""
            try:
                await runtime.inbound.answer(
                    press.approval_id, choice=choice, user=press.user, team=press.user_team
                )
            except ApprovalError as exc:
                await tell(refusal(exc))
            except Exception:
                log.exception("answering a question failed", approval_id=press.approval_id)
            return
        if press.approval_id:
            decision = _DECISIONS.get(press.action)
            if decision is None:
                return
            if press.raw.get("home") is True and not await self._named(runtime, press):
                await tell(
                    refusal(NotAllowedToDecide(press.approval_id, press.user, "not_approver"))
                )
                return
            try:
                await runtime.inbound.decide(
                    press.approval_id,
                    decision=decision,
                    user=press.user,
                    team=press.user_team,
                )
            except ApprovalError as exc:
                await tell(refusal(exc))
            except Exception:
                log.exception("deciding a button press failed", approval_id=press.approval_id)
            return
        action = _SCHEDULE_ACTIONS.get(press.action)
        conversation_id = await runtime.store.conversation_id_for(press.conversation)
        if conversation_id is None or not press.value or action is None:
            return
        try:
            await runtime.inbound.change_schedule(
                press.value,
                action,
                user=press.user,
                conversation_id=conversation_id,
            )
        except ScheduleActionError as exc:
            await tell(f"{exc}.")
            return
        if press.message is not None:
            text, payload = await runtime.commands.jobs_listing(conversation_id)
            await self._adapters[press.platform].sender.edit(
                Edit(
                    message=press.message,
                    text=text,
                    payload=payload,
                    idempotency_key=f"{press.platform_event_id}:listing",
                )
            )

    async def _forget(
        self, runtime: Runtime, press: ButtonPress, tell: Callable[[str], Awaitable[None]]
    ) -> None:
        """``forget me``'s confirmation pressed: erase the presser (who must be the one who
        asked), or keep; the question is edited to say which."""
        meant = forget_me.answer(press.value or "", user=press.user, now=utcnow())
        if meant not in ("erase", "keep"):
            await tell(meant)
            return
        if meant == "keep":
            text = "Kept: nothing was erased."
        else:
            receipt = await forget_person(runtime, press.user, actor=press.user)
            text = forget_me.receipt_text(receipt)
        if press.message is not None:
            await self._adapters[press.platform].sender.edit(
                Edit(
                    message=press.message,
                    text=text,
                    payload=None,
                    idempotency_key=f"{press.platform_event_id}:forget",
                )
            )

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """Run ``coroutine`` to its end even when the request that started it is over."""
        work = asyncio.ensure_future(coroutine)
        self._background.add(work)
        work.add_done_callback(self._finished)
        return work

    async def drain(self) -> None:
        """Wait for what is still running in the background."""
        if self._background:
            await asyncio.wait(set(self._background))

    def _finished(self, work: asyncio.Future[Any]) -> None:
        self._background.discard(work)
        if not work.cancelled() and work.exception() is not None:
            log.error("handling a message failed", exc_info=work.exception())


def gateway_hooks(app: web.Application, faults: FaultPoints) -> GatewayHooks:
    """What the gateway lends its adapters (resolved when called: the runtime exists
    once the app has started)."""

    def lock(name: str) -> Holder:
        runtime = app[RUNTIME]
        return Holder(runtime.store, name, owner=runtime.owner, ttl=runtime.settings.lease_seconds)

    async def set_aside(
        platform: Platform, event_id: str, raw: Mapping[str, Any], error: str
    ) -> bool:
        runtime = app[RUNTIME]
        try:
            await runtime.store.dead_letter(
                platform=platform, event_id=event_id, raw=dict(raw), error=error
            )
        except Exception:
            log.exception("could not set an event aside", platform=platform, event_id=event_id)
            return False
        runtime.metrics.dead_letters.labels(platform).inc()
        log.error("%s update set aside as dead", platform, event_id=event_id, error=error)
        return True

    async def database_up() -> bool:
        try:
            await app[RUNTIME].store.ping()
        except Exception:
            return False
        return True

    def rejected(platform: Platform) -> None:
        app[RUNTIME].inbound.reject(platform)

    async def heard_until(platform: Platform) -> datetime | None:
        return await app[RUNTIME].store.heard_until(platform)

    async def hear_until(platform: Platform, at: datetime) -> None:
        await app[RUNTIME].store.hear_until(platform, at)

    async def recent(platform: Platform, since: datetime) -> list[ConversationKey]:
        found = await app[RUNTIME].store.list_conversations(
            platform=platform, limit=500, since=since
        )
        return [c.key for c in found]

    async def ledgered(platform: Platform, event_ids: Collection[str]) -> set[str]:
        return await app[RUNTIME].store.ledgered_among(platform, event_ids)

    suggestions: list[Suggestions] = []  # built on first use: the runtime exists by then

    async def suggest(
        kind: Suggest, where: ConversationKey, user: str, typed: str
    ) -> list[tuple[str, str]]:
        if not suggestions:
            suggestions.append(Suggestions(app[RUNTIME]))
        return await suggestions[0](kind, where, user, typed)

    async def home(platform: Platform, user: str, team: str | None) -> PersonHome:
        runtime = app[RUNTIME]
        return await person_home(
            runtime.store,
            refusal=runtime.inbound.approvals.refusal,
            named=runtime.inbound.approvals.named,
            user=user,
            team=team,
            platform=platform,
            now=utcnow(),
        )

    return GatewayHooks(
        lock=lock,
        set_aside=set_aside,
        database_up=database_up,
        rejected=rejected,
        faults=faults,
        heard_until=heard_until,
        hear_until=hear_until,
        recent=recent,
        ledgered=ledgered,
        suggest=suggest,
        home=home,
    )


class Platforms:
    """The gateway's adapters: mounted when the app is built, entered and run while it
    serves, stopped when it shuts down."""

    def __init__(self, app: web.Application, adapters: Mapping[Platform, ChatAdapter]) -> None:
        self.adapters = dict(adapters)
        self.sink = Sink(app, self.adapters)
        self._running: list[asyncio.Task[None]] = []
        for adapter in self.adapters.values():
            adapter.mount(app.router, self.sink)
            add_platform_check(app, adapter.ready)
        hearings: dict[str, Hearing] = {p: a.hearing for p, a in self.adapters.items()}
        app[PLATFORM_HEARING] = hearings
        taken = {r.canonical for r in app.router.resources()}
        for path, message in UNCONFIGURED_ROUTES.items():
            if path not in taken:
                app.router.add_post(path, _not_configured(message))

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        """Open every adapter (its sender's connections) until ``stack`` closes."""
        for adapter in self.adapters.values():
            await stack.enter_async_context(adapter)

    def start(self, stopping: asyncio.Event, *, report_every: float) -> None:
        """Receive: each adapter's long-lived connection, as a task; and say in the log,
        every ``report_every`` seconds, which platform is deaf."""
        for platform, adapter in self.adapters.items():
            self._running.append(
                asyncio.create_task(
                    _receive(adapter, self.sink, stopping), name=f"adapter:{platform}"
                )
            )
        self._running.append(
            asyncio.create_task(self._report(stopping, report_every), name="deafness")
        )

    async def _report(self, stopping: asyncio.Event, every: float) -> None:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(every):
                    await stopping.wait()
            for platform, adapter in self.adapters.items():
                hearing = adapter.hearing
                if hearing.deaf_since is not None:
                    log.warning(
                        "platform deaf",
                        platform=platform,
                        since=hearing.snapshot()["deaf_since"],
                        reason=hearing.reason,
                    )

    async def stop(self) -> None:
        """Stop receiving (what was fetched and not stored is fetched again next time),
        then let what is being handled finish."""
        for task in self._running:
            task.cancel()
        for task in self._running:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._running.clear()
        await self.sink.drain()


async def _receive(adapter: ChatAdapter, sink: Sink, stopping: asyncio.Event) -> None:
    try:
        await adapter.run(sink, stopping)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("an adapter stopped receiving", platform=adapter.platform)


def _not_configured(message: str) -> Any:
    async def handler(request: web.Request) -> web.Response:
        return json_error(404, message)

    return handler
