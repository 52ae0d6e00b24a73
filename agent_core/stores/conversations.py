"""The conversation's path: messages in (the ingress ledger), the turn journal, and the
marks shown on a turn's message."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Literal, Protocol

from pydantic import JsonValue

from agent_core.events import ConversationKey, InboundMessage
from agent_core.records import (
    Accepted,
    BusyMode,
    ConversationRecord,
    FinishedStep,
    HistoryLine,
    MessageRecord,
    Role,
    StepKind,
    StepStatus,
    StopRequest,
    TurnRecord,
    TurnState,
    TurnStatus,
)


class Marks(Protocol):
    """What a turn's message shows (``Outbound.mark``), journaled by the inbound path (a
    message that waits) and by the turn."""

    async def record_mark(self, turn_id: int, state: TurnState) -> None:
        """Journal the state shown on the turn's message: the next mark, in whichever
        process, replaces it."""
        ...


class Ledger(Marks, Protocol):
    """The ingress ledger and the conversations it fills: messages in, notes and listings out."""

    async def accept_inbound(self, event: InboundMessage, *, open_turn: bool = True) -> Accepted:
        """Ledger the event, store the user's message and open a turn, all or nothing.

        A second delivery of the same (platform, platform_event_id) changes nothing and
        returns what the first one created, with ``duplicate=True``. With ``open_turn``
        false (a text command) the message is kept but no turn is opened (turn_id 0).
        """
        ...

    async def set_busy_mode(self, conversation_id: str, mode: BusyMode | None) -> None:
        """Set the conversation's busy mode (``/busy``); None goes back to the setting's."""
        ...

    async def busy_mode(self, conversation_id: str) -> BusyMode | None:
        """The conversation's own busy mode, if it has one."""
        ...

    async def pin(
        self, conversation_id: str, *, kind: Literal["profile", "model"], value: str | None
    ) -> None:
        """Choose the conversation's profile or model (``/profile``, ``/model``); None
        goes back to what its place gives it."""
        ...

    async def pins(self, conversation_id: str) -> tuple[str | None, str | None]:
        """The profile and the model chosen for the conversation, if any."""
        ...

    async def request_stop(
        self,
        conversation_id: str,
        user: str,
        *,
        before_turn: int | None = None,
        only_turn: int | None = None,
    ) -> StopRequest | None:
        """``stop``: mark the conversation's current turn (the first not finished; older
        than ``before_turn`` when given; only if it is ``only_turn`` when given) as asked
        to stop by ``user`` (the first to ask stays named); None when it has none.
        Returns the approvals it waits for, to cancel."""
        ...

    async def ledgered_among(self, platform: str, event_ids: Collection[str]) -> set[str]:
        """Which of ``event_ids`` are in the ingress ledger already."""
        ...

    async def conversation_id_for(self, key: ConversationKey) -> str | None:
        """The id of the conversation at ``key``, if it exists."""
        ...

    async def edit_message(self, key: ConversationKey, message_id: str, text: str) -> str | None:
        """A person edited their message: ``replaced`` (its turn had not started),
        ``running`` (its turn runs: nothing stored), ``noted`` (answered already), or None
        (not one of ours)."""
        ...

    async def forget_message(self, key: ConversationKey, message_id: str) -> int:
        """A person deleted their message (``message_id``, the platform's) at ``key``: out
        of the history, with the memories drawn from its turn; its turn, if not started,
        unanswered. How many were found."""
        ...

    async def conversation(self, conversation_id: str) -> ConversationRecord | None:
        """One conversation by id, or None."""
        ...

    async def message(self, message_id: int) -> MessageRecord | None:
        """One message by id."""
        ...

    async def list_conversations(
        self, *, platform: str, limit: int = 200, since: datetime | None = None
    ) -> list[ConversationRecord]:
        """A platform's conversations (active since ``since``), most recently active first."""
        ...

    async def messages_after(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 500
    ) -> list[MessageRecord]:
        """A conversation's messages with ids above ``after_id``, in order."""
        ...

    async def history(
        self, conversation_id: str, *, before_turn_id: int, limit: int
    ) -> list[MessageRecord]:
        """The user and assistant messages of earlier turns, oldest first (at most ``limit``).

        Ordered by turn, then message: a reply belongs after the question it answered even
        when later questions were stored before it.
        """
        ...

    async def add_note(
        self,
        conversation_id: str,
        text: str,
        *,
        approval_id: str | None = None,
        payload: JsonValue = None,
        key: str | None = None,
    ) -> int:
        """Add a system message to the conversation (shown to people, not to the model);
        with ``key``, once: a second call returns the first note's id."""
        ...

    async def rewrite_note(self, message_id: int, text: str, payload: JsonValue) -> None:
        """Replace a note's text and structured content (a ``jobs`` listing after a
        button changed a schedule)."""
        ...

    async def start_fresh(self, conversation_id: str, note: str) -> int:
        """``new``: add ``note`` and let the model see only what comes after it."""
        ...

    async def dead_letter(
        self, *, platform: str, event_id: str, raw: JsonValue, error: str
    ) -> None:
        """Set an update aside that cannot be processed (kept as escaped JSON)."""
        ...

    async def conversations_needing_work(self, *, limit: int = 500) -> list[str]:
        """Conversations with an open turn and no live lease: what a sweeper should run."""
        ...

    async def open_turn_count(self, conversation_id: str | None = None) -> int:
        """How many turns have not finished (in one conversation, or anywhere)."""
        ...

    async def ping(self) -> None:
        """Raise ``StorageError`` when the database does not answer."""
        ...


class Journal(Marks, Protocol):
    """Turns and their journaled steps, under the conversation's lease."""

    async def renew_lease(self, conversation_id: str, *, owner: str, ttl: float) -> bool:
        """Extend a lease this owner still holds; never takes a free or expired one."""
        ...

    async def claim_and_begin(
        self, conversation_id: str, *, owner: str, ttl: float
    ) -> tuple[bool, TurnRecord | None]:
        """Take the lease and start the oldest open turn, in one transaction: (claimed,
        the turn). With nothing to run, the lease is given back in the same transaction."""
        ...

    async def next_or_release(self, conversation_id: str, *, owner: str) -> TurnRecord | None:
        """Start the next open turn, or, when there is none, give the lease up: one
        transaction either way."""
        ...

    async def release_lease(self, conversation_id: str, *, owner: str) -> None:
        """Give the lease up, if this owner still holds it."""
        ...

    async def begin_next_turn(self, conversation_id: str) -> TurnRecord | None:
        """Start the conversation's oldest unfinished turn (counting the attempt) and return
        it with its journal; None when every turn has finished."""
        ...

    async def start_turn(self, turn_id: int) -> TurnRecord:
        """Mark one turn running, count the attempt, and return it with its journal."""
        ...

    async def load_turn(self, turn_id: int) -> TurnRecord:
        """A turn, the message that triggered it, and every journaled step in order."""
        ...

    async def finish_turn(self, turn_id: int, *, status: TurnStatus, error: str | None) -> None:
        """Close a turn for good."""
        ...

    async def begin_step(self, turn_id: int, seq: int, *, kind: StepKind, input: JsonValue) -> None:
        """Journal that a step is about to happen (a redo keeps the first row)."""
        ...

    async def finish_step(
        self, turn_id: int, seq: int, *, kind: StepKind, status: StepStatus, output: JsonValue
    ) -> None:
        """Journal a step's outcome (creating the row if its start was not journaled)."""
        ...

    async def start_model_call(
        self, turn: TurnRecord, seq: int, *, input: JsonValue, history_limit: int
    ) -> tuple[str | None, list[HistoryLine]]:
        """Journal a model call as started; return the conversation's running summary and
        the history after it, before this turn (at most ``history_limit`` messages, oldest
        first), in one transaction."""
        ...

    async def save_summary(self, conversation_id: str, *, summary: str, upto_turn: int) -> bool:
        """Replace the running summary with one covering turns up to ``upto_turn``."""
        ...

    async def record_reply_intent(
        self,
        turn: TurnRecord,
        seq: int,
        *,
        role: Role,
        text: str,
        delivery_key: str,
        answered: FinishedStep | None = None,
        extract: bool = False,
    ) -> int:
        """Journal the reply step and add the reply to the history in one transaction;
        ``answered`` is the model call that produced the reply, journaled in it too, and
        with ``extract`` the job that picks durable facts out of the turn is queued in it."""
        ...

    async def record_quiet_answer(
        self, turn: TurnRecord, seq: int, *, report: str, answered: FinishedStep | None
    ) -> None:
        """A quiet run's answer not worth posting: the model call, a reply step that posted
        nothing (with ``report``, the model's reason) and the turn done, in one
        transaction."""
        ...

    async def last_message_at(self, conversation_id: str) -> datetime | None:
        """When the conversation's newest message from a person arrived (``collect``)."""
        ...

    async def take_in(self, turn: TurnRecord, seq: int) -> list[str]:
        """Take the messages that arrived after ``turn``'s and wait for turns of their own
        into it (busy modes ``steer``, ``collect``): their turns end as merged, the journal's
        ``steer`` step ``seq`` holds their texts; returns them, in order (none: no step)."""
        ...

    async def stop_requested(self, turn_id: int) -> str | None:
        """Who asked the turn to stop (``stop``), if anyone did: read while it runs, so a
        ``stop`` said through another process reaches it."""
        ...

    async def record_live_message(self, turn_id: int, message: str) -> None:
        """Journal the platform message the turn's reply is shown in as it is written
        (its receipt from the start: a resumed turn goes on in it, never posts another)."""
        ...

    async def record_reply_chunks(self, turn_id: int, seq: int, receipts: list[str]) -> None:
        """Journal the message ids of a long reply's chunks sent so far."""
        ...

    async def record_reply_sent(
        self,
        turn_id: int,
        seq: int,
        *,
        receipt: str,
        turn_status: TurnStatus | None = None,
        error: str | None = None,
    ) -> None:
        """Journal the platform's receipt; with ``turn_status``, also close the turn."""
        ...

    async def record_reply_sent_and_next(
        self,
        turn_id: int,
        seq: int,
        *,
        receipt: str,
        turn_status: TurnStatus,
        error: str | None,
        conversation_id: str,
        owner: str,
    ) -> TurnRecord | None:
        """``record_reply_sent`` and ``next_or_release`` in one transaction: the receipt
        journaled, the turn closed, then the conversation's next open turn started, or the
        lease given up when there is none."""
        ...

    async def suspend_turn(self, turn_id: int, approval_id: str) -> bool:
        """Let the turn wait for a decision (it no longer holds up its conversation);
        False when the approval was decided already."""
        ...
