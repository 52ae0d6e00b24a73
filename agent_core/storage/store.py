"""The store: every read and write chatgate makes, as one façade.

Each public method is one transaction, written as a plain function over a connection (in
``ledger``, ``journal``, ``approvals``, ``access``, ``schedules`` and ``jobs`` beside this
module) and run by :class:`~agent_core.storage.database.Database`. Writes that must happen together
share one: the ledger row, the user's message and the turn; a reply's journal step and
its message; the receipt and the end of the turn.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Literal

from pydantic import JsonValue
from sqlalchemy.exc import IntegrityError

from agent_core.budgets import Spent
from agent_core.events import ConversationKey, InboundMessage, event_to_json, utcnow
from agent_core.records import (
    Accepted,
    ApprovalRecord,
    ApprovalRequest,
    ApprovalStatus,
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
    Usage,
)
from agent_core.storage import approval_routes as route_sql
from agent_core.storage import approvals as approval_sql
from agent_core.storage import journal, ledger, message_changes, upkeep
from agent_core.storage import leases as lease_sql
from agent_core.storage import locks as lock_sql
from agent_core.storage import marks as mark_sql
from agent_core.storage import owners as owner_sql
from agent_core.storage import questions as question_sql
from agent_core.storage import schedules as schedule_sql
from agent_core.storage import usage as usage_sql
from agent_core.storage.database import Database
from agent_core.storage.feedback_rows import FeedbackRows
from agent_core.storage.files import FileRows
from agent_core.storage.home import HomeRows
from agent_core.storage.job_rows import JobRows
from agent_core.storage.people import PeopleRows
from agent_core.storage.schedule_rows import ScheduleRows
from agent_core.storage.trigger_rows import TriggerRows

# Event ids per ``IN`` list (well under SQLite's and asyncpg's bound-parameter limits).
_IDS_PER_READ = 500


class Store(PeopleRows, FileRows, FeedbackRows, HomeRows, ScheduleRows, JobRows, TriggerRows):
    """All reads and writes chatgate makes (what concerns people, memory and access in
    :class:`~agent_core.storage.people.PeopleRows`; the files messages carry in
    :class:`~agent_core.storage.files.FileRows`; ratings of replies in
    :class:`~agent_core.storage.feedback_rows.FeedbackRows`; a person's own page in
    :class:`~agent_core.storage.home.HomeRows`; queued work in
    :class:`~agent_core.storage.job_rows.JobRows`; triggers in
    :class:`~agent_core.storage.trigger_rows.TriggerRows`)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # -- ingress ---------------------------------------------------------------------------

    async def ping(self) -> None:
        """Raise ``StorageError`` when the database does not answer."""
        await self.database.ping()

    async def accept_inbound(self, event: InboundMessage, *, open_turn: bool = True) -> Accepted:
        """Ledger the event, store the user's message and open a turn, all or nothing.

        A second delivery of the same (platform, platform_event_id) changes nothing and
        returns what the first one created, with ``duplicate=True``. With ``open_turn``
        false (a text command) the message is kept but no turn is opened (turn_id 0).
        """
        try:
            return await self.database.write(
                ledger.accept, event, payload=event_to_json(event), open_turn=open_turn
            )
        except IntegrityError:
            # Another process ledgered the same event between our check and our insert.
            existing = await self.database.read(
                ledger.ledgered, event.platform, event.platform_event_id
            )
            if existing is None:
                raise
            return existing

    async def ledgered_among(self, platform: str, event_ids: Collection[str]) -> set[str]:
        """Which of ``event_ids`` are in the ingress ledger already (one read: a catch-up
        that re-reads what was heard skips it without a failing insert per event)."""
        found: set[str] = set()
        ids = list(event_ids)
        for start in range(0, len(ids), _IDS_PER_READ):
            chunk = ids[start : start + _IDS_PER_READ]
            found |= await self.database.read(ledger.ledgered_among, platform, chunk)
        return found

    # -- leases ----------------------------------------------------------------------------

    async def renew_lease(self, conversation_id: str, *, owner: str, ttl: float) -> bool:
        """Extend a lease this owner still holds; never takes a free or expired one."""
        return await self.database.write(ledger.renew, conversation_id, owner=owner, ttl=ttl)

    async def claim_and_begin(
        self, conversation_id: str, *, owner: str, ttl: float
    ) -> tuple[bool, TurnRecord | None]:
        """Take the lease and start the oldest open turn, in one transaction: (claimed,
        the turn). With nothing to run, the lease is given back in the same transaction."""
        return await self.database.write(
            ledger.claim_and_begin, conversation_id, owner=owner, ttl=ttl
        )

    async def next_or_release(self, conversation_id: str, *, owner: str) -> TurnRecord | None:
        """Start the next open turn, or, when there is none, give the lease up: one
        transaction either way."""
        return await self.database.write(ledger.next_or_release, conversation_id, owner=owner)

    async def release_lease(self, conversation_id: str, *, owner: str) -> None:
        """Give the lease up, if this owner still holds it."""
        await self.database.write(ledger.release, conversation_id, owner=owner)

    async def conversations_needing_work(self, *, limit: int = 500) -> list[str]:
        """Conversations with an open turn and no live lease: what a sweeper should run."""
        return await self.database.read(ledger.needing_work, limit=limit)

    # -- turns and their journal -----------------------------------------------------------

    async def begin_next_turn(self, conversation_id: str) -> TurnRecord | None:
        """Start the conversation's oldest unfinished turn (counting the attempt) and return
        it with its journal; None when every turn has finished."""
        return await self.database.write(journal.begin_next, conversation_id)

    async def start_turn(self, turn_id: int) -> TurnRecord:
        """Mark one turn running, count the attempt, and return it with its journal."""
        return await self.database.write(journal.start, turn_id)

    async def load_turn(self, turn_id: int) -> TurnRecord:
        """A turn, the message that triggered it, and every journaled step in order."""
        return await self.database.read(journal.load_turn, turn_id)

    async def finish_turn(self, turn_id: int, *, status: TurnStatus, error: str | None) -> None:
        """Close a turn for good."""
        await self.database.write(journal.finish_turn, turn_id, status=status, error=error)

    async def begin_step(self, turn_id: int, seq: int, *, kind: StepKind, input: JsonValue) -> None:
        """Journal that a step is about to happen (a redo keeps the first row)."""
        await self.database.write(journal.begin_step, turn_id, seq, kind=kind, input=input)

    async def finish_step(
        self, turn_id: int, seq: int, *, kind: StepKind, status: StepStatus, output: JsonValue
    ) -> None:
        """Journal a step's outcome (creating the row if its start was not journaled)."""
        await self.database.write(
            journal.finish_step, turn_id, seq, kind=kind, status=status, output=output
        )

    async def start_model_call(
        self, turn: TurnRecord, seq: int, *, input: JsonValue, history_limit: int
    ) -> tuple[str | None, list[HistoryLine]]:
        """Journal a model call as started; return the conversation's running summary and
        the history after it, before this turn (at most ``history_limit`` messages, oldest
        first), in one transaction."""
        return await self.database.write(
            ledger.model_call_started, turn, seq, input=input, history_limit=history_limit
        )

    async def save_summary(self, conversation_id: str, *, summary: str, upto_turn: int) -> bool:
        """Replace the running summary with one covering turns up to ``upto_turn``."""
        return await self.database.write(
            ledger.save_summary, conversation_id, summary=summary, upto_turn=upto_turn
        )

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
        return await self.database.write(
            upkeep.reply_intent,
            turn,
            seq,
            role=role,
            text=text,
            delivery_key=delivery_key,
            answered=answered,
            extract=extract,
        )

    async def take_in(self, turn: TurnRecord, seq: int) -> list[str]:
        """Take the messages waiting behind ``turn`` into it (journaled as step ``seq``)."""
        return await self.database.write(journal.take_in, turn, seq)

    async def last_message_at(self, conversation_id: str) -> datetime | None:
        """When the conversation's newest message from a person arrived."""
        return await self.database.read(ledger.last_message_at, conversation_id)

    async def set_busy_mode(self, conversation_id: str, mode: BusyMode | None) -> None:
        """The conversation's busy mode (None: the setting's)."""
        await self.database.write(ledger.set_busy_mode, conversation_id, mode)

    async def busy_mode(self, conversation_id: str) -> BusyMode | None:
        """The conversation's own busy mode, if it has one."""
        return await self.database.read(ledger.busy_mode, conversation_id)

    async def pin(
        self, conversation_id: str, *, kind: Literal["profile", "model"], value: str | None
    ) -> None:
        """Choose the conversation's profile or model; None clears the choice."""
        await self.database.write(ledger.pin, conversation_id, kind=kind, value=value)

    async def pins(self, conversation_id: str) -> tuple[str | None, str | None]:
        """The profile and the model chosen for the conversation."""
        return await self.database.read(ledger.pins, conversation_id)

    async def request_stop(
        self,
        conversation_id: str,
        user: str,
        *,
        before_turn: int | None = None,
        only_turn: int | None = None,
    ) -> StopRequest | None:
        """Ask the conversation's current turn to stop (None: nothing runs or waits)."""
        return await self.database.write(
            journal.request_stop,
            conversation_id,
            user,
            before_turn=before_turn,
            only_turn=only_turn,
        )

    async def stop_requested(self, turn_id: int) -> str | None:
        """Who asked the turn to stop, if anyone did."""
        return await self.database.read(journal.stop_requested, turn_id)

    async def record_mark(self, turn_id: int, state: TurnState) -> None:
        """Journal the state shown on the turn's message."""
        await self.database.write(journal.marked, turn_id, state)

    async def record_live_message(self, turn_id: int, message: str) -> None:
        """Journal the platform message the turn's reply is shown in as it is written."""
        await self.database.write(journal.live_message, turn_id, message)

    async def record_reply_chunks(self, turn_id: int, seq: int, receipts: list[str]) -> None:
        """Journal the message ids of a long reply's chunks sent so far."""
        await self.database.write(journal.reply_chunks_sent, turn_id, seq, receipts)

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
        await self.database.write(
            journal.reply_sent, turn_id, seq, receipt=receipt, turn_status=turn_status, error=error
        )

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
        return await self.database.write(
            ledger.reply_sent_and_next,
            turn_id,
            seq,
            receipt=receipt,
            turn_status=turn_status,
            error=error,
            conversation_id=conversation_id,
            owner=owner,
        )

    # -- locks, notes and spending ---------------------------------------------------------

    async def take_lock(self, name: str, *, owner: str, ttl: float) -> bool:
        """Take the named lock for ``ttl`` seconds, if it is free (or already ours)."""
        return await self.database.write(lock_sql.take, name, owner=owner, ttl=ttl)

    async def renew_lock(self, name: str, *, owner: str, ttl: float) -> bool:
        """Extend our hold on the lock; False when it is no longer ours."""
        return await self.database.write(lock_sql.renew, name, owner=owner, ttl=ttl)

    async def release_lock(self, name: str, *, owner: str) -> None:
        """Give the lock up (a no-op when it is not ours)."""
        await self.database.write(lock_sql.release, name, owner=owner)

    async def heard_until(self, platform: str) -> datetime | None:
        """Until when ``platform``'s receiving session was last known to hear (None when
        none ever did)."""
        return await self.database.read(mark_sql.heard_until, platform)

    async def hear_until(self, platform: str, at: datetime) -> None:
        """``platform``'s receiving session heard everything sent before ``at``."""
        await self.database.write(mark_sql.hear_until, platform, at)

    async def lease_holders(self) -> list[str]:
        """Who holds a lease that has not expired: a conversation's, a job's or a lock."""
        return await self.database.read(lease_sql.holders)

    async def expire_leases(self, owners: Collection[str]) -> int:
        """End every lease ``owners`` hold now, as if it had expired; how many."""
        return await self.database.write(lease_sql.expire, owners)

    async def start_fresh(self, conversation_id: str, note: str) -> int:
        """``new``: add ``note`` and let the model see only what comes after it."""
        return await self.database.write(ledger.start_fresh, conversation_id, note=note)

    async def spending(self, conversation_id: str, user: str, *, turn_id: int = 0) -> Spent:
        """What a turn (when given), its conversation, its user today and everyone today
        spent."""
        return await self.database.read(
            usage_sql.spent,
            turn_id=turn_id,
            conversation_id=conversation_id,
            user=user,
            now=utcnow(),
        )

    async def usage(self, conversation_id: str) -> Usage:
        """Turns, model calls and tokens spent in this conversation so far."""
        return await self.database.read(journal.usage, conversation_id)

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
        return await self.database.write(
            ledger.add_note,
            conversation_id,
            text=text,
            approval_id=approval_id,
            payload=payload,
            key=key,
        )

    async def rewrite_note(self, message_id: int, text: str, payload: JsonValue) -> None:
        """Replace a note's text and structured content (a ``jobs`` listing after a
        button changed a schedule)."""
        await self.database.write(ledger.rewrite_note, message_id, text=text, payload=payload)

    # -- set aside and refused -------------------------------------------------------------

    async def dead_letter(
        self, *, platform: str, event_id: str, raw: JsonValue, error: str
    ) -> None:
        """Set an update aside that cannot be processed (kept as escaped JSON)."""
        await self.database.write(
            ledger.dead_letter, platform=platform, event_id=event_id, raw=raw, error=error
        )

    async def refuse_job(self, job_id: int, *, owner: str, error: str, note: str) -> int | None:
        """Close a job without running it (its owner lost access); the note's id, or None
        when the job is no longer ours."""
        return await self.database.write(
            owner_sql.refuse_job, job_id, owner=owner, error=error, note=note
        )

    # -- approvals -------------------------------------------------------------------------

    async def request_approval(
        self, turn: TurnRecord, seq: int, request: ApprovalRequest
    ) -> ApprovalRecord:
        """Ask (once per turn and step): the approval row, its prompt and its journal step."""
        return await self.database.write(approval_sql.request, turn, seq, request)

    async def approval_prompt_sent(self, approval_id: str, *, turn_id: int, receipt: str) -> bool:
        """The prompt is delivered: record its receipt and let the turn wait (False: it
        was decided already, so the turn goes on instead)."""
        return await self.database.write(
            approval_sql.prompt_sent, approval_id, turn_id=turn_id, receipt=receipt
        )

    async def suspend_turn(self, turn_id: int, approval_id: str) -> bool:
        """Let the turn wait for a decision (it no longer holds up its conversation);
        False when the approval was decided already."""
        return await self.database.write(approval_sql.suspend, turn_id, approval_id)

    async def decide_approval(
        self,
        approval_id: str,
        *,
        status: ApprovalStatus,
        user: str,
        note: str,
        answer: str | None = None,
    ) -> ApprovalRecord | None:
        """First decision wins; None when it was already decided. ``answer``: what a
        question (``ask_user``) was answered."""
        return await self.database.write(
            approval_sql.decide, approval_id, status=status, user=user, note=note, answer=answer
        )

    async def mark_answering(self, approval_id: str, user: str) -> ApprovalRecord | None:
        """``user`` pressed a question's "Other": their next message here answers it (None:
        the question is over, or another person pressed "Other" first)."""
        return await self.database.write(question_sql.mark_answering, approval_id, user)

    async def approval(self, approval_id: str) -> ApprovalRecord | None:
        """One approval by id."""
        return await self.database.read(approval_sql.load, approval_id)

    async def approval_for_step(self, turn_id: int, seq: int) -> ApprovalRecord | None:
        """The approval a turn asked for at a journal step, if any."""
        return await self.database.read(approval_sql.for_step, turn_id, seq)

    async def add_approval_copy(
        self, approval_id: str, where: ConversationKey, *, message_id: str, sent_to: str
    ) -> None:
        """A copy of the prompt was sent to ``sent_to``'s DM (a decision edits it too)."""
        await self.database.write(
            route_sql.add_copy, approval_id, where, message_id=message_id, sent_to=sent_to
        )

    async def approval_copies(self, approval_id: str) -> list[tuple[ConversationKey, str]]:
        """The prompt's copies outside its conversation: where, and the message."""
        return await self.database.read(route_sql.copies, approval_id)

    async def escalate_approval(
        self, approval_id: str, *, until: datetime
    ) -> ApprovalRecord | None:
        """Pass a pending approval on to its ``escalate_to`` (once), waiting ``until``;
        None when it is decided or has nobody to pass it on to."""
        return await self.database.write(route_sql.escalate, approval_id, until=until)

    async def due_approvals(self) -> list[str]:
        """Pending approvals whose time is up."""
        return await self.database.read(approval_sql.due, utcnow())

    async def grants(self, conversation_id: str, user: str) -> frozenset[str]:
        """Tools this person allowed in this conversation ("Allow in this conversation"
        covers the calls of whoever pressed it)."""
        return await self.database.read(approval_sql.granted_tools, conversation_id, user)

    # -- conversations and history ---------------------------------------------------------

    async def history(
        self, conversation_id: str, *, before_turn_id: int, limit: int
    ) -> list[MessageRecord]:
        """The user and assistant messages of earlier turns, oldest first (at most ``limit``).

        Ordered by turn, then message: a reply belongs after the question it answered even
        when later questions were stored before it.
        """
        return await self.database.read(
            ledger.history, conversation_id, before_turn_id=before_turn_id, limit=limit
        )

    async def messages_after(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 500
    ) -> list[MessageRecord]:
        """A conversation's messages with ids above ``after_id``, in order."""
        return await self.database.read(
            ledger.messages_after, conversation_id, after_id=after_id, limit=limit
        )

    async def conversation_id_for(self, key: ConversationKey) -> str | None:
        """The id of the conversation at ``key``, if it exists."""
        return await self.database.read(ledger.conversation_id_for, key)

    async def conversation_scope(self, conversation_id: str) -> list[str]:
        """This conversation, and its channel's threads when it is a channel's own."""
        return await self.database.read(schedule_sql.scope, conversation_id)

    async def forget_message(self, key: ConversationKey, message_id: str) -> int:
        """A person deleted their message (see ``storage.message_changes``)."""
        return await self.database.write(
            message_changes.forget_message, key, message_id, now=utcnow()
        )

    async def edit_message(self, key: ConversationKey, message_id: str, text: str) -> str | None:
        """A person edited their message (see ``storage.message_changes.edit_message``)."""
        return await self.database.write(message_changes.edit_message, key, message_id, text)

    async def find_conversation(self, platform: str, channel: str) -> str | None:
        """The id of a channel's own conversation (not one of its threads), if we know it."""
        return await self.database.read(ledger.find_conversation, platform, channel)

    async def message(self, message_id: int) -> MessageRecord | None:
        """One message by id."""
        return await self.database.read(ledger.message_by_id, message_id)

    async def conversation(self, conversation_id: str) -> ConversationRecord | None:
        """One conversation by id, or None."""
        return await self.database.read(ledger.conversation_by_id, conversation_id)

    async def list_conversations(
        self, *, platform: str, limit: int = 200, since: datetime | None = None
    ) -> list[ConversationRecord]:
        """A platform's conversations (active since ``since``), most recently active first."""
        return await self.database.read(
            ledger.list_conversations, platform=platform, limit=limit, since=since
        )

    async def open_turn_count(self, conversation_id: str | None = None) -> int:
        """How many turns have not finished (in one conversation, or anywhere)."""
        return await self.database.read(ledger.open_turn_count, conversation_id)
