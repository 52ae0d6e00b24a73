"""Run and resume turns: a journaled state machine, safe to re-enter after a crash.

A turn's journal (``turn_steps``) holds, in order:

    seq 1  model_call   started -> done (output: the reply text, model, token counts)
    seq 2  reply        started = reply_intent (the reply is in the history)
                        done    = reply_sent   (output: the platform's receipt)

Running a turn reads the journal first and only does what is not yet recorded: a model
call that started but never finished is made again; a reply with an intent but no receipt
is sent again with the same idempotency key (``turn_id:seq``), which the sender uses to
avoid a duplicate. Tools and approvals add steps between these two (issue #3).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

import structlog
from pydantic import JsonValue

from agent_core.context import pack, rough_tokens
from agent_core.delivery import Outbound
from agent_core.errors import LeaseLost, ModelError
from agent_core.events import Reply
from agent_core.faults import FaultPoints
from agent_core.model import ChatMessage, Model
from agent_core.records import Role, StepStatus, TurnRecord, TurnStatus
from agent_core.storage.store import Store

log = structlog.get_logger("chatgate.turn")

MODEL_STEP = 1
REPLY_STEP = 2

GAVE_UP_REPLY = (
    "Sorry, I could not answer this message: it failed {attempts} times in a row. "
    "Send it again to retry; the details are in the gateway log."
)
NO_MODEL_REPLY = (
    "No model is configured, so I cannot answer yet. Set CHATGATE_MODEL to a litellm model "
    "name (for example openai/gpt-4o-mini), and CHATGATE_MODEL_API_BASE / "
    "CHATGATE_MODEL_API_KEY for an OpenAI-compatible server, then restart chatgate."
)


class TurnObserver(Protocol):
    """Told when turns start and finish (metrics hang off this)."""

    def turn_started(self, turn: TurnRecord) -> None:
        """A turn is about to run (or resume)."""
        ...

    def turn_finished(self, turn: TurnRecord, *, status: TurnStatus | None, seconds: float) -> None:
        """A turn stopped running here: ``status`` is final, or None if it was interrupted."""
        ...


class TurnRunner:
    """Runs a conversation's open turns one at a time, under the conversation's lease."""

    def __init__(
        self,
        store: Store,
        *,
        model: Model | None,
        outbound: Outbound,
        system_prompt: str,
        reply_max_tokens: int = 1024,
        history_limit: int = 200,
        max_attempts: int = 5,
        faults: FaultPoints | None = None,
        observer: TurnObserver | None = None,
    ) -> None:
        self._store = store
        self._model = model
        self._outbound = outbound
        self._system_prompt = system_prompt
        self._reply_max_tokens = reply_max_tokens
        self._history_limit = history_limit
        self._max_attempts = max_attempts
        self._faults = faults or FaultPoints()
        self._observer = observer

    async def run_conversation(self, conversation_id: str, *, owner: str, lease: float) -> int:
        """Run every open turn of a conversation in order; return how many finished.

        Returns 0 without running anything when another process holds the lease.
        """
        if not await self._store.claim_lease(conversation_id, owner=owner, ttl=lease):
            return 0
        finished = 0
        try:
            async with self._heartbeat(conversation_id, owner=owner, lease=lease):
                while (turn := await self._store.begin_next_turn(conversation_id)) is not None:
                    await self.run_turn(turn)
                    finished += 1
        finally:
            # The heartbeat has stopped by now, so nothing renews the lease after this.
            await asyncio.shield(self._store.release_lease(conversation_id, owner=owner))
        return finished

    @contextlib.asynccontextmanager
    async def _heartbeat(
        self, conversation_id: str, *, owner: str, lease: float
    ) -> AsyncIterator[None]:
        """Renew the lease while the body runs; cancel the body if the lease is lost."""
        body = asyncio.current_task()
        assert body is not None
        lost = False

        async def renew() -> None:
            nonlocal lost
            while True:
                await asyncio.sleep(lease / 3)
                if not await self._store.renew_lease(conversation_id, owner=owner, ttl=lease):
                    lost = True
                    body.cancel()
                    return

        renewer = asyncio.create_task(renew(), name=f"lease:{conversation_id}")
        try:
            yield
        except asyncio.CancelledError:
            if lost:
                raise LeaseLost(conversation_id) from None
            raise
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def run_turn(self, turn: TurnRecord) -> TurnStatus:
        """Run (or resume) a started turn to its end, doing only what the journal lacks.

        ``turn`` comes from ``Store.begin_next_turn`` or ``Store.start_turn``, which count the
        attempt. A turn that already failed ``max_attempts`` times (a bug, or a process that
        keeps dying on it) is given up: the user is told, and the conversation moves on.
        """
        started = time.monotonic()
        if self._observer:
            self._observer.turn_started(turn)
        status: TurnStatus | None = None
        with structlog.contextvars.bound_contextvars(
            turn_id=turn.id,
            conversation_id=turn.conversation_id,
            platform=turn.conversation.platform,
        ):
            try:
                if turn.attempts >= self._max_attempts:
                    status = await self._give_up(turn)
                    return status
                role, text, error = await self._model_step(turn)
                final: TurnStatus = "failed" if error else "done"
                await self._reply_step(turn, role=role, text=text, status=final, error=error)
                status = final
                log.info("turn finished", status=status, error=error, attempt=turn.attempts + 1)
                return status
            finally:
                if self._observer:
                    seconds = time.monotonic() - started
                    self._observer.turn_finished(turn, status=status, seconds=seconds)

    async def _give_up(self, turn: TurnRecord) -> TurnStatus:
        error = f"gave up after {turn.attempts} attempts"
        log.error("turn abandoned", attempts=turn.attempts)
        if turn.step(REPLY_STEP) is None:
            text = GAVE_UP_REPLY.format(attempts=turn.attempts)
            try:
                await self._reply_step(turn, role="system", text=text, status="failed", error=error)
                return "failed"
            except Exception:
                log.exception("could not tell the user the turn was abandoned")
        await self._store.finish_turn(turn.id, status="failed", error=error)
        return "failed"

    async def _model_step(self, turn: TurnRecord) -> tuple[Role, str, str | None]:
        step = turn.step(MODEL_STEP)
        if step is not None and step.status != "started" and isinstance(step.output, dict):
            stored = step.output
            return _role(stored.get("role")), str(stored.get("text", "")), _error(stored)
        output: dict[str, JsonValue]
        if self._model is None:
            await self._store.begin_step(turn.id, MODEL_STEP, kind="model_call", input={})
            output = {"role": "system", "text": NO_MODEL_REPLY, "error": "no model configured"}
        else:
            prompt = await self._prompt(turn)
            await self._store.begin_step(
                turn.id,
                MODEL_STEP,
                kind="model_call",
                input={"model": self._model.name, "messages": len(prompt)},
            )
            try:
                reply = await self._model.complete(prompt, max_tokens=self._reply_max_tokens)
            except ModelError as exc:
                output = {
                    "role": "system",
                    "text": f"Sorry, the model could not be reached ({exc}). "
                    "Your message is saved; send it again to retry.",
                    "error": str(exc),
                }
            else:
                output = {
                    "role": "assistant",
                    "text": reply.text or "(the model returned an empty reply)",
                    "model": reply.model,
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                }
        status: StepStatus = "failed" if "error" in output else "done"
        await self._store.finish_step(
            turn.id, MODEL_STEP, kind="model_call", status=status, output=output
        )
        self._faults.hit("after_model_call")
        return _role(output["role"]), str(output["text"]), _error(output)

    async def _prompt(self, turn: TurnRecord) -> list[ChatMessage]:
        assert self._model is not None
        history = [
            ChatMessage(role="assistant" if m.role == "assistant" else "user", content=m.text)
            for m in await self._store.history(
                turn.conversation_id,
                before_turn_id=turn.id,
                limit=self._history_limit,
            )
        ]
        message = ChatMessage(role="user", content=turn.trigger_text)
        budget = self._model.context_window() - self._reply_max_tokens
        packed = pack(system=self._system_prompt, history=history, message=message, budget=budget)
        if rough_tokens(packed) > budget // 2:
            # Close to the window: count exactly with the model's tokenizer.
            packed = pack(
                system=self._system_prompt,
                history=history,
                message=message,
                budget=budget,
                count=self._model.count_tokens,
            )
        return packed

    async def _reply_step(
        self, turn: TurnRecord, *, role: Role, text: str, status: TurnStatus, error: str | None
    ) -> None:
        """Journal the reply, deliver it, then journal the receipt and close the turn."""
        step = turn.step(REPLY_STEP)
        if step is not None and step.status == "done":
            await self._store.finish_turn(turn.id, status=status, error=error)
            return
        key = f"{turn.id}:{REPLY_STEP}"
        if step is None:
            await self._store.record_reply_intent(
                turn, REPLY_STEP, role=role, text=text, delivery_key=key
            )
            self._faults.hit("after_reply_intent")
        elif isinstance(step.input, dict):
            # Resend exactly what was journaled, not a fresh rendering.
            text = str(step.input.get("text", text))
        reply = Reply(
            conversation=turn.conversation,
            text=text,
            reply_to=turn.reply_to,
            idempotency_key=key,
        )
        receipt = await self._outbound.send(reply)
        self._faults.hit("after_send")
        await self._store.record_reply_sent(
            turn.id, REPLY_STEP, receipt=receipt, turn_status=status, error=error
        )


def _role(value: object) -> Role:
    return "system" if value == "system" else "assistant"


def _error(output: Mapping[str, object]) -> str | None:
    error = output.get("error")
    return None if error is None else str(error)
