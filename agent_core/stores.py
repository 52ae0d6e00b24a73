"""The storage port: what the core asks of the database, one Protocol per concern.

Consumers depend on the narrow Protocols they use (the turn runner on the ``Journal``, the
gatekeeper on the ``Ledger`` and ``AccessStore`` ...); ``agent_core.storage.store.Store``
implements them all over SQLAlchemy, and only the bootstraps (``gateway.app``,
``workers.bootstrap``, the CLI) build it. :class:`Storage` is every concern at once, for the
processes' runtimes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import JsonValue

from agent_core.budgets import Spent
from agent_core.events import ConversationKey, InboundMessage
from agent_core.journaled import Spend
from agent_core.records import (
    Accepted,
    ApprovalRecord,
    ApprovalRequest,
    ApprovalStatus,
    BusyMode,
    ConversationRecord,
    FinishedStep,
    HistoryLine,
    JobOutcome,
    JobRecord,
    MemoryRecord,
    MemoryScope,
    MessageRecord,
    NewSchedule,
    OwnedWork,
    PairedUser,
    PairingOutcome,
    PairingRequest,
    Planner,
    Role,
    ScheduleRecord,
    ScheduleStatus,
    StepKind,
    StepStatus,
    StopRequest,
    TurnRecord,
    TurnState,
    TurnStatus,
    Usage,
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
    ) -> int:
        """Add a system message to the conversation (shown to people, not to the model)."""
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


class ApprovalStore(Protocol):
    """Approvals: asked, prompted, decided, expired; and the grants they leave."""

    async def request_approval(
        self, turn: TurnRecord, seq: int, request: ApprovalRequest
    ) -> ApprovalRecord:
        """Ask (once per turn and step): the approval row, its prompt and its journal step."""
        ...

    async def approval_prompt_sent(self, approval_id: str, *, turn_id: int, receipt: str) -> bool:
        """The prompt is delivered: record its receipt and let the turn wait (False: it
        was decided already, so the turn goes on instead)."""
        ...

    async def decide_approval(
        self, approval_id: str, *, status: ApprovalStatus, user: str, note: str
    ) -> ApprovalRecord | None:
        """First decision wins; None when it was already decided."""
        ...

    async def approval(self, approval_id: str) -> ApprovalRecord | None:
        """One approval by id."""
        ...

    async def approval_for_step(self, turn_id: int, seq: int) -> ApprovalRecord | None:
        """The approval a turn asked for at a journal step, if any."""
        ...

    async def due_approvals(self) -> list[str]:
        """Pending approvals whose time is up."""
        ...

    async def grants(self, conversation_id: str, user: str) -> frozenset[str]:
        """Tools this person allowed in this conversation ("Allow in this conversation"
        covers the calls of whoever pressed it)."""
        ...


class AccessStore(Protocol):
    """Who may talk to the agent: pairing, revocation, and what a person owns."""

    async def is_paired(self, user: str) -> bool:
        """True when an admin let this user in and nobody revoked them since."""
        ...

    async def request_pairing(
        self,
        *,
        platform: str,
        user: str,
        conversation_id: str,
        code: str,
        expires_at: datetime,
        max_pending: int,
    ) -> tuple[PairingOutcome, PairingRequest | None]:
        """A new code for a stranger, the one still pending, or none (too many pending)."""
        ...

    async def approve_pairing(self, code: str, *, actor: str) -> PairingRequest:
        """Let the code's user in (audited); raises ``PairingRefused``."""
        ...

    async def revoke_user(self, user: str, *, actor: str) -> bool:
        """Shut a paired user out (audited); False when they were not paired."""
        ...

    async def pairing_listing(self) -> tuple[list[PairingRequest], list[PairedUser]]:
        """Pending requests and paired users."""
        ...

    async def latest_revocation(self) -> datetime | None:
        """When anyone was last revoked (None: never)."""
        ...

    async def revoked_since(self, since: datetime | None) -> list[str]:
        """Users revoked after ``since`` (all revoked users when None)."""
        ...

    async def owned_work(self, users: Sequence[str] | None) -> list[OwnedWork]:
        """Pending approvals and active schedules of ``users`` (everyone's when None)."""
        ...

    async def pause_for_access(self, work: OwnedWork, *, note: str) -> int | None:
        """Pause a schedule whose owner lost access, with a note; the note's id, or None
        when it was not active any more."""
        ...


class ScheduleStore(Protocol):
    """Schedules and the conversations they deliver to; due slots fired into jobs."""

    async def create_schedule(self, new: NewSchedule) -> tuple[ScheduleRecord, bool]:
        """Store a schedule (False: the same creation key made it before)."""
        ...

    async def schedule(self, schedule_id: str) -> ScheduleRecord | None:
        """One schedule by id."""
        ...

    async def schedules_for(self, conversation_id: str, *, runs: int = 0) -> list[ScheduleRecord]:
        """This conversation's schedules (created here or delivering here), each with its
        latest ``runs`` deliveries to this conversation."""
        ...

    async def set_schedule_status(
        self,
        schedule_id: str,
        *,
        status: ScheduleStatus,
        allowed_from: tuple[ScheduleStatus, ...],
        next_run_at: datetime | None = None,
    ) -> ScheduleRecord | None:
        """Pause, resume or delete (compare-and-set); None when the status did not allow it."""
        ...

    async def conversation_scope(self, conversation_id: str) -> list[str]:
        """This conversation, and its channel's threads when it is a channel's own."""
        ...

    async def find_conversation(self, platform: str, channel: str) -> str | None:
        """The id of a channel's own conversation (not one of its threads), if we know it."""
        ...

    async def dispatch_due(
        self, *, now: datetime, plan: Planner, limit: int = 500
    ) -> tuple[int, list[int]]:
        """Fire due schedule slots: (schedules claimed, new job ids)."""
        ...

    async def plan_maintenance(self, *, slot: datetime) -> list[int]:
        """Claim a maintenance slot and queue its per-person jobs (empty: not ours)."""
        ...


class JobStore(Protocol):
    """Queued work: claimed, renewed, retried, finished, and sent to the broker."""

    async def background_turn(
        self, conversation_id: str, *, user: str, prompt: str, reply_to: str | None
    ) -> int:
        """``bg PROMPT``: queue a turn for a worker; returns the job id."""
        ...

    async def refuse_job(self, job_id: int, *, owner: str, error: str, note: str) -> int | None:
        """Close a job without running it (its owner lost access); the note's id, or None
        when the job is no longer ours."""
        ...

    async def claim_job(self, job_id: int | None, *, owner: str, ttl: float) -> JobRecord | None:
        """Take a job's lease (the given one, or the next claimable); None if not free."""
        ...

    async def renew_job(self, job_id: int, *, owner: str, ttl: float) -> bool:
        """Extend a job lease this owner holds."""
        ...

    async def retry_job(self, job_id: int, *, owner: str, at: datetime, error: str) -> bool:
        """Back in the queue, due at ``at``."""
        ...

    async def hand_back_job(self, job_id: int, *, owner: str) -> bool:
        """Give a job this process cannot finish back to the queue, due now."""
        ...

    async def job_waiting(self, job_id: int, *, owner: str) -> None:
        """The job's turn waits for an approval."""
        ...

    async def finish_job(
        self,
        job_id: int,
        *,
        owner: str,
        turn_status: TurnStatus,
        error: str | None,
        failure_limit: int,
        pause_note: str,
    ) -> JobOutcome | None:
        """Close the job with its turn's outcome (see ``storage.jobs.finish``)."""
        ...

    async def note_sent(self, note_id: int, *, receipt: str) -> None:
        """Record a delivered note's receipt."""
        ...

    async def jobs_to_send(self, *, now: datetime, resend_after: timedelta) -> list[int]:
        """Jobs the broker should be given (again)."""
        ...

    async def jobs_sent(self, job_ids: list[int], *, now: datetime) -> None:
        """These jobs were handed to the broker."""
        ...

    async def job_depth(self) -> tuple[dict[str, int], float]:
        """Unfinished jobs by status, and the seconds the oldest due job has waited."""
        ...


class MemoryStore(Protocol):
    """What the agent remembers about people and conversations, and its upkeep."""

    async def remember(
        self,
        *,
        user: str,
        conversation_id: str,
        scope: MemoryScope,
        fact: str,
        about: str | None,
        source: str,
    ) -> tuple[int, int]:
        """Store a fact (superseding the person's older fact about the same thing);
        return its id and how many facts it superseded."""
        ...

    async def recall(
        self, *, user: str, conversation_id: str, query: str, limit: int = 8
    ) -> list[MemoryRecord]:
        """The live facts matching ``query`` that this person may see here, best first."""
        ...

    async def forget(
        self, *, user: str, conversation_id: str, memory_id: int, admin: bool = False
    ) -> bool:
        """Forget a fact this person may forget (see ``memory.forget``); False when there is
        none by that id."""
        ...

    async def finish_extraction(
        self,
        job_id: int,
        *,
        owner: str,
        turn_id: int,
        facts: Sequence[tuple[str, str | None]],
        spend: Spend,
    ) -> int | None:
        """Close an extract job with its facts and spend, if it is still ours (else None)."""
        ...

    async def unreviewed_facts(
        self, user: str, *, after: int = 0, limit: int
    ) -> list[MemoryRecord]:
        """A person's live facts maintenance has not looked at, oldest first, after an id."""
        ...

    async def similar_older_facts(
        self, user: str, newer: MemoryRecord, *, limit: int
    ) -> list[MemoryRecord]:
        """The person's live facts older than ``newer`` sharing words with it."""
        ...

    async def review_fact(
        self, user: str, fact: MemoryRecord, *, obsolete: Sequence[int] | None, spend: Spend | None
    ) -> int:
        """Let ``fact`` supersede the ``obsolete`` older facts and mark it reviewed (None:
        leave it for the next review), and count the model call's spend, in one
        transaction; returns how many it superseded."""
        ...


class UsageStore(Protocol):
    """What conversations and people have spent."""

    async def spending(self, conversation_id: str, user: str, *, turn_id: int = 0) -> Spent:
        """What a turn (when given), its conversation, its user today and everyone today
        spent."""
        ...

    async def usage(self, conversation_id: str) -> Usage:
        """Turns, model calls and tokens spent in this conversation so far."""
        ...


class LockStore(Protocol):
    """Named locks one process holds at a time."""

    async def take_lock(self, name: str, *, owner: str, ttl: float) -> bool:
        """Take the named lock for ``ttl`` seconds, if it is free (or already ours)."""
        ...

    async def renew_lock(self, name: str, *, owner: str, ttl: float) -> bool:
        """Extend our hold on the lock; False when it is no longer ours."""
        ...

    async def release_lock(self, name: str, *, owner: str) -> None:
        """Give the lock up (a no-op when it is not ours)."""
        ...

    async def lease_holders(self) -> list[str]:
        """Who holds a lease that has not expired: a conversation's, a job's or a lock."""
        ...

    async def expire_leases(self, owners: Collection[str]) -> int:
        """End every lease ``owners`` hold now, as if it had expired; how many."""
        ...

    async def heard_until(self, platform: str) -> datetime | None:
        """Until when ``platform``'s receiving session was last known to hear (None when
        none ever did)."""
        ...

    async def hear_until(self, platform: str, at: datetime) -> None:
        """``platform``'s receiving session heard everything sent before ``at``."""
        ...


class Storage(
    Ledger,
    Journal,
    ApprovalStore,
    AccessStore,
    ScheduleStore,
    JobStore,
    MemoryStore,
    UsageStore,
    LockStore,
    Protocol,
):
    """Every concern at once: what a process's runtime holds."""
