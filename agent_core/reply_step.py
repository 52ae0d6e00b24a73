"""A turn's last step: its reply journaled (the intent, with the model call it answers),
delivered (into the message it was shown in as it was written, if any), and its receipt
journaled, closing the turn; under a lane, in the transaction that starts the lane's next
turn or gives its lease up. Re-entered after a crash, it sends what the journal holds again
with the same key, after the chunks already sent."""

from __future__ import annotations

from agent_core import tracing
from agent_core.delivery import Outbound
from agent_core.events import Reply
from agent_core.faults import FaultPoints
from agent_core.live_reply import PENDING
from agent_core.records import FinishedStep, Role, TurnRecord, TurnStatus
from agent_core.stores import Journal
from agent_core.turn_lease import Lane


class ReplyStep:
    """Journal, deliver and close: ``await reply_step(turn, seq, ...)``."""

    def __init__(
        self, store: Journal, outbound: Outbound, *, faults: FaultPoints, extract: bool
    ) -> None:
        self._store = store
        self._outbound = outbound
        self._faults = faults
        self._extract = extract  # queue a memory extraction after a person's answered turn

    async def __call__(
        self,
        turn: TurnRecord,
        seq: int,
        *,
        role: Role,
        text: str,
        status: TurnStatus,
        error: str | None,
        answered: FinishedStep | None = None,
        lane: Lane | None = None,
        live_message: str | None = None,
    ) -> None:
        """Journal the reply (with ``answered``, the model call it comes from), deliver it
        (into ``live_message`` when it was shown there as it was written), then journal the
        receipt and close the turn (with ``lane``, in the transaction that starts the lane's
        next turn or gives its lease up)."""
        step = turn.step(seq)
        if step is not None and step.status == "done":
            await self._store.finish_turn(turn.id, status=status, error=error)
            return
        key = f"{turn.id}:{seq}"
        if step is None:
            extract = self._extract and role == "assistant" and not turn.queued
            await self._store.record_reply_intent(
                turn,
                seq,
                role=role,
                text=text,
                delivery_key=key,
                answered=answered,
                extract=extract and status == "done",
            )
            if answered is not None:
                self._faults.hit("after_model_call")
            self._faults.hit("after_reply_intent")
        elif isinstance(step.input, dict):
            # Resend exactly what was journaled, not a fresh rendering.
            text = str(step.input.get("text", text))
        sent: list[str] = []
        if step is not None and isinstance(step.output, dict):
            chunks = step.output.get("chunks")
            sent = [str(receipt) for receipt in chunks] if isinstance(chunks, list) else []
        reply = Reply(
            conversation=turn.conversation,
            text=text,
            reply_to=turn.reply_to,
            idempotency_key=key,
            resend=step is not None,
            delivered=tuple(sent),
            # An attempt that gives up, or is stopped, finishes the shown message too.
            live_message=live_message or known_message(turn.live_message),
        )

        async def chunk_sent(index: int, receipt: str) -> None:
            sent[index:] = [receipt]
            await self._store.record_reply_chunks(turn.id, seq, sent)

        sending = tracing.reply_attributes(turn, seq, resent=step is not None)
        with tracing.span("chatgate.reply", sending):
            receipt = await self._outbound.send(reply, progress=chunk_sent)
        self._faults.hit("after_send")
        if lane is None:
            await self._store.record_reply_sent(
                turn.id, seq, receipt=receipt, turn_status=status, error=error
            )
            return
        # The transaction may give the lease up: not a loss for the heartbeat.
        lane.beat.releasing = True
        lane.next = await self._store.record_reply_sent_and_next(
            turn.id,
            seq,
            receipt=receipt,
            turn_status=status,
            error=error,
            conversation_id=lane.conversation_id,
            owner=lane.owner,
        )
        lane.taken = True
        lane.beat.releasing = lane.next is None


def known_message(live_message: str | None) -> str | None:
    """A journaled live message's id, or None (none, or only about to be posted)."""
    return None if live_message == PENDING else live_message
