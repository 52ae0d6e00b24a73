"""What every chat platform's inbound path shares: accept a message within the platform's
acknowledgement deadline, and act on a button press (an approval, or a ``jobs`` listing's
pause, resume and delete)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from agent_core.errors import ApprovalError, ScheduleActionError
from agent_core.events import ButtonPress, Edit, InboundMessage
from agent_core.records import Accepted
from gateway.dispatch import refusal
from gateway.runtime import Runtime

log = structlog.get_logger("chatgate.inbound")

JOB_VERBS = ("pause", "resume", "delete")


class Acceptor:
    """Hands messages to the dispatcher and returns as soon as they are in the ledger, or
    at the platform's acknowledgement deadline, whichever is first; the rest (a command's
    answer, which may wait on a 429) finishes in the background."""

    def __init__(self, deadline: float | None) -> None:
        self._deadline = deadline
        self._background: set[asyncio.Future[Any]] = set()

    async def accept(self, runtime: Runtime, event: InboundMessage) -> Accepted | None:
        """Return once the event is stored (with what the ledger said), or None when the
        deadline passed first; raise when storing it failed (the database is down), so the
        platform delivers it again later."""
        stored: asyncio.Future[Accepted] = asyncio.get_running_loop().create_future()

        def done(accepted: Accepted) -> None:
            if not stored.done():
                stored.set_result(accepted)

        work = asyncio.ensure_future(runtime.dispatcher.accept(event, stored=done))
        self._background.add(work)
        work.add_done_callback(self._finished)
        try:
            await asyncio.wait(
                {work, stored}, timeout=self._deadline, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if not stored.done():
                stored.cancel()
        if work.done():
            return work.result()
        return stored.result() if stored.done() and not stored.cancelled() else None

    def run(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run ``coroutine`` to its end even when the request that started it is over."""
        work = asyncio.ensure_future(coroutine)
        self._background.add(work)
        work.add_done_callback(self._finished)
        return work

    async def within_deadline(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run ``coroutine``; stop waiting for it at the deadline (it goes on)."""
        await asyncio.wait({self.run(coroutine)}, timeout=self._deadline)

    async def drain(self) -> None:
        """Wait for what is still running in the background."""
        if self._background:
            await asyncio.wait(set(self._background))

    def _finished(self, work: asyncio.Future[Any]) -> None:
        self._background.discard(work)
        if not work.cancelled() and work.exception() is not None:
            log.error("handling a message failed", exc_info=work.exception())


async def act_on_press(
    runtime: Runtime,
    press: ButtonPress,
    *,
    refuse: Callable[[str], Awaitable[None]],
    edit: Callable[[Edit], Awaitable[None]],
) -> None:
    """Decide an approval, or change a schedule and redraw its listing in place; a person
    who may not do that is told through ``refuse`` (shown to them alone)."""
    if press.approval_id:
        try:
            await runtime.dispatcher.decide(
                press.approval_id,
                decision=press.action,  # type: ignore[arg-type]
                user=press.user,
                team=press.user_team,
            )
        except ApprovalError as exc:
            await refuse(refusal(exc))
        except Exception:
            log.exception("deciding a button press failed", approval_id=press.approval_id)
        return
    conversation_id = await runtime.store.conversation_id_for(press.conversation)
    if conversation_id is None or not press.value or press.action not in JOB_VERBS:
        return
    try:
        await runtime.dispatcher.change_schedule(
            press.value,
            press.action,  # type: ignore[arg-type]
            user=press.user,
            conversation_id=conversation_id,
        )
    except ScheduleActionError as exc:
        await refuse(f"{exc}.")
        return
    if press.message is not None:
        text, payload = await runtime.dispatcher.jobs_listing(conversation_id)
        await edit(
            Edit(
                message=press.message,
                text=text,
                payload=payload,
                idempotency_key=f"{press.platform_event_id}:listing",
            )
        )
